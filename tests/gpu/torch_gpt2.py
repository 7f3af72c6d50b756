# A small GPT-2 from transformers through whatever libcuda.so.1 comes first: the model is built
# from a GPT2Config with seeded random weights (nothing is downloaded, no tokenizer: token ids
# are used directly), then greedy generation in fp32 and again in fp16. Prints the generated ids;
# native and rgpu runs must print the same ones.
import argparse
import os
import sys


def parse_args(argv):
    p = argparse.ArgumentParser(description="greedy generation with a random-weight GPT-2")
    p.add_argument("--layers", type=int, default=4, choices=range(1, 13), metavar="N",
                   help="transformer blocks (default 4)")
    p.add_argument("--embd", type=int, default=512, help="embedding width (default 512)")
    p.add_argument("--new-tokens", type=int, default=32, help="tokens to generate (default 32)")
    p.add_argument("--batch", type=int, default=2, help="prompts generated together (default 2)")
    args = p.parse_args(argv)
    if args.embd % 64:
        p.error("--embd must be a multiple of 64 (one head per 64 channels)")
    if args.new_tokens < 1 or args.batch < 1:
        p.error("--new-tokens and --batch must be positive")
    return args


def main(argv):
    args = parse_args(argv)
    # No network on the GPU host: never let transformers try the hub.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    config = GPT2Config(n_layer=args.layers, n_embd=args.embd, n_head=args.embd // 64,
                        n_positions=256, vocab_size=50257)
    model = GPT2LMHeadModel(config).eval().cuda()
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, config.vocab_size, (args.batch, 16), generator=gen).cuda()
    mask = torch.ones_like(prompt)
    print("model: GPT-2, %d layers, n_embd %d, %.1f M parameters" % (
        args.layers, args.embd, sum(p.numel() for p in model.parameters()) / 1e6))
    results = {}
    for dtype in (torch.float32, torch.float16):
        model = model.to(dtype)
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=mask, do_sample=False,
                                 max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                 pad_token_id=config.eos_token_id)
        new = out[:, prompt.shape[1]:].cpu().tolist()
        name = str(dtype).replace("torch.", "")
        results[name] = new
        for i, ids in enumerate(new):
            print("%s prompt %d: %s" % (name, i, " ".join(map(str, ids))))
    same = sum(a == b for x, y in zip(results["float32"], results["float16"]) for a, b in zip(x, y))
    total = sum(len(x) for x in results["float32"])
    print("fp16 tokens equal to fp32: %d of %d" % (same, total))
    ok = all(len(ids) == args.new_tokens for r in results.values() for ids in r)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
