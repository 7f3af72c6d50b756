#!/usr/bin/env python3
"""The rgpu pool as a DRA ResourceSlice (deploy/kubernetes/pool, docs/pool.md "Kubernetes").

  rgpu status --json | resourceslice.py GENERATION [DRIVER] > slice.json   (JSON is YAML)

One device per GPU of every server that answered the probe (a server down or refusing the
publisher's token is left out, so the scheduler stops allocating its GPUs), named s<server>-gpu<g>,
with the server's address, name, the GPU's index and model as attributes and its memory as
capacity; available from every node (allNodes). GENERATION must grow with every write (the
publisher passes the time in seconds): the scheduler uses the slice of the highest generation."""
import json
import sys

MAX_DEVICES = 128  # devices in one ResourceSlice (the API's limit)


def main():
    if len(sys.argv) < 2 or not sys.argv[1].isdigit():
        sys.exit("usage: rgpu status --json | resourceslice.py GENERATION [DRIVER]")
    generation = int(sys.argv[1])
    driver = sys.argv[2] if len(sys.argv) > 2 else "rgpu.example.org"
    status = json.load(sys.stdin)
    devices = []
    for i, server in enumerate(status.get("servers", [])):
        if not server.get("answered"):
            continue
        for gpu in server.get("gpus", []):
            devices.append({
                "name": "s%d-gpu%d" % (i, gpu["index"]),
                "attributes": {
                    "server": {"string": server["address"]},
                    "serverName": {"string": server.get("server_name") or server["address"]},
                    "index": {"int": gpu["index"]},
                    "model": {"string": gpu["name"]},
                },
                "capacity": {"memory": {"value": str(gpu["memory_total_bytes"])}},
            })
    if len(devices) > MAX_DEVICES:
        sys.exit("resourceslice.py: %d GPUs: more than one slice holds (%d); split the pool"
                 % (len(devices), MAX_DEVICES))
    spec = {
        "driver": driver,
        "pool": {"name": "rgpu", "generation": generation, "resourceSliceCount": 1},
        "allNodes": True,
    }
    if devices:
        spec["devices"] = devices
    json.dump({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
               "metadata": {"name": "rgpu-pool"}, "spec": spec}, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
