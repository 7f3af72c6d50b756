# CUDA IPC as PyTorch uses it: torch.multiprocessing hands a CUDA tensor to a spawned process
# (cudaIpcGetMemHandle / cudaIpcOpenMemHandle, and an IPC event for the producer's writes); the
# consumer reads it, writes to it, and the producer sees the write. Through rgpu the two
# processes are two sessions of one gpu-server. Prints the same lines natively and through rgpu.
import torch
import torch.multiprocessing as mp


def consumer(q, done):
    t = q.get()
    seen = float(t.sum())
    t.mul_(2)
    torch.cuda.synchronize()
    done.put(seen)
    q.get()  # keep the tensor until the producer has read it back


def main():
    mp.set_start_method("spawn")
    q, done = mp.Queue(), mp.Queue()
    t = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    p = mp.Process(target=consumer, args=(q, done))
    p.start()
    q.put(t)
    seen = done.get(timeout=300)
    torch.cuda.synchronize()
    after = float(t.sum())
    q.put(None)
    p.join(timeout=120)
    print(f"consumer read sum {seen:.1f}")
    print(f"producer reads sum {after:.1f} after the consumer doubled it")
    print("PASS" if after == 2 * seen and p.exitcode == 0 else "FAIL")


if __name__ == "__main__":
    main()
