#!/usr/bin/env python3
"""rgpu_dra_plugin.py against a kubelet and an API server played here (no cluster).

  test_nodeplugin.py STUBS_DIR      (the stubs generated from proto/ by grpc_tools.protoc)

Starts the plugin with temporary registry, plugin and CDI directories and an HTTP API server
that serves ResourceClaims; as the kubelet: GetInfo on the registration socket,
NotifyRegistrationStatus, NodePrepareResources (v1) of a claim of 2 devices (the CDI spec and
the ids answered), again (same answer, no second read), claims refused (UID not the API
server's, another driver's, two requests, a bad UID, beyond --max-claims), a claim of 1 device
through v1beta1, NodeUnprepareResources (the spec gone; again: no error), and SIGTERM (the
sockets removed, the remaining spec kept). Prints ok/FAIL lines; exit 1 on any failure."""
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
STUBS = os.path.abspath(sys.argv[1])
sys.path.insert(0, STUBS)
import dra_v1_pb2 as v1  # noqa: E402
import dra_v1_pb2_grpc as v1_grpc  # noqa: E402
import dra_v1beta1_pb2 as v1beta1  # noqa: E402
import dra_v1beta1_pb2_grpc as v1beta1_grpc  # noqa: E402
import pluginregistration_v1_pb2 as reg  # noqa: E402
import pluginregistration_v1_pb2_grpc as reg_grpc  # noqa: E402

DRIVER = "rgpu.example.org"
POOL = "gpu-server.rgpu.svc.cluster.local:7070,10.0.0.9:7070"
TOKEN = "sa-token-123"
U2 = "0f8e3a52-1111-4c1e-9b52-2a2b3c4d5e6f"
U1 = "0f8e3a52-2222-4c1e-9b52-2a2b3c4d5e6f"
failures = 0


def check(what, cond, detail=""):
    global failures
    print("%s %s%s" % ("ok  " if cond else "FAIL", what, "" if cond else ": %s" % detail))
    if not cond:
        failures += 1


def result(request, device, driver=DRIVER):
    return {"request": request, "driver": driver, "pool": "rgpu", "device": device}


CLAIMS = {  # (namespace, name) -> the claim the API server has
    ("default", "job-a-rgpu"): (U2, [result("gpu", "s0-gpu0"), result("gpu", "s1-gpu0")]),
    ("team-b", "job-b-rgpu"): (U1, [result("gpu", "s1-gpu1")]),
    ("default", "stale"): ("aaaaaaaa-0000-0000-0000-000000000000", [result("gpu", "s0-gpu0")]),
    ("default", "other-driver"): ("bbbbbbbb-0000-0000-0000-000000000000",
                                  [result("gpu", "x", driver="gpu.nvidia.com")]),
    ("default", "two-requests"): ("cccccccc-0000-0000-0000-000000000000",
                                  [result("a", "s0-gpu0"), result("b", "s1-gpu0")]),
    ("default", "third"): ("dddddddd-0000-0000-0000-000000000000", [result("gpu", "s2-gpu0")]),
}
gets = []


class Api(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        gets.append((self.path, self.headers.get("Authorization")))
        parts = self.path.split("/")  # /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/N
        key = (parts[5], parts[7]) if len(parts) == 8 else None
        if key not in CLAIMS or parts[1:4] != ["apis", "resource.k8s.io", "v1"]:
            self.send_error(404)
            return
        uid, results = CLAIMS[key]
        body = json.dumps({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                           "metadata": {"namespace": key[0], "name": key[1], "uid": uid},
                           "status": {"allocation": {"devices": {"results": results}}}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def main():
    work = tempfile.mkdtemp(prefix="rgpu-dra-")
    regdir, plugdir, cdidir = (os.path.join(work, d) for d in ("registry", "plugins", "cdi"))
    client = os.path.join(work, "client")
    os.makedirs(os.path.join(client, "lib", "rgpu"))
    open(os.path.join(client, "lib", "rgpu", "libcuda.so.1"), "w").close()
    with open(os.path.join(work, "token"), "w") as f:
        f.write(TOKEN + "\n")
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    log = open(os.path.join(work, "plugin.log"), "w+")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "rgpu_dra_plugin.py"), "--stubs", STUBS,
         "--registry-dir", regdir, "--plugin-dir", plugdir, "--cdi-dir", cdidir,
         "--client-dir", client, "--pool", POOL, "--max-claims", "2",
         "--api-server", "http://127.0.0.1:%d" % api.server_address[1],
         "--token-file", os.path.join(work, "token")], stdout=log, stderr=subprocess.STDOUT)
    try:
        run(proc, regdir, plugdir, cdidir, client, log)
    finally:
        if proc.poll() is None:
            proc.kill()
        api.shutdown()
        log.seek(0)
        print("---- plugin log\n" + log.read() + "----")
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    print("%d failed" % failures)
    return 1 if failures else 0


def run(proc, regdir, plugdir, cdidir, client, log):
    regsock = os.path.join(regdir, DRIVER + "-reg.sock")
    for _ in range(200):  # the plugin's start: python and grpc load (a wait, not a timing)
        if os.path.exists(regsock) or proc.poll() is not None:
            break
        time.sleep(0.05)
    check("the plugin's registration socket appears in the registry dir", os.path.exists(regsock),
          "exit %s" % proc.poll())
    if not os.path.exists(regsock):
        return
    with grpc.insecure_channel("unix:" + regsock) as ch:
        info = reg_grpc.RegistrationStub(ch).GetInfo(reg.InfoRequest(), timeout=10)
        endpoint = os.path.join(plugdir, "dra.sock")
        check("GetInfo: type DRAPlugin, name %s" % DRIVER,
              (info.type, info.name) == ("DRAPlugin", DRIVER), str(info))
        check("GetInfo: endpoint %s, a socket" % endpoint,
              info.endpoint == endpoint and os.path.exists(endpoint), info.endpoint)
        check("GetInfo: supported_versions v1.DRAPlugin then v1beta1.DRAPlugin",
              list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"],
              list(info.supported_versions))
        reg_grpc.RegistrationStub(ch).NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=True), timeout=10)

    with grpc.insecure_channel("unix:" + info.endpoint) as ch:
        dra = v1_grpc.DRAPluginStub(ch)
        claim = v1.Claim(namespace="default", name="job-a-rgpu", uid=U2)
        resp = dra.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=[claim]),
                                        timeout=10)
        r = resp.claims[U2]
        cdi_id = "%s/gpu=%s" % (DRIVER, U2)
        check("v1 prepare of a claim of 2 devices: no error", r.error == "", r.error)
        check("... both devices answered, with pool, request, the CDI id on the first",
              [(list(d.request_names), d.pool_name, d.device_name, list(d.cdi_device_ids))
               for d in r.devices] == [(["gpu"], "rgpu", "s0-gpu0", [cdi_id]),
                                       (["gpu"], "rgpu", "s1-gpu0", [])], str(r))
        check("... the API server was asked for that claim with the service account token",
              gets == [("/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/job-a-rgpu",
                        "Bearer " + TOKEN)], gets)
        path = os.path.join(cdidir, "%s-%s.json" % (DRIVER, U2))
        spec = json.load(open(path)) if os.path.exists(path) else {}
        want = {"cdiVersion": "0.3.0", "kind": DRIVER + "/gpu", "devices": [{
            "name": U2, "containerEdits": {
                "env": ["RGPU_POOL=" + POOL, "RGPU_GPUS=2", "RGPU_LIBDIR=/opt/rgpu/lib/rgpu"],
                "mounts": [{"hostPath": client, "containerPath": "/opt/rgpu",
                            "options": ["ro", "nosuid", "nodev", "bind"]}]}}]}
        check("... CDI spec %s: kind %s/gpu, device %s: RGPU_POOL, RGPU_GPUS=2, the client "
              "mounted read-only" % (os.path.basename(path), DRIVER, U2), spec == want,
              json.dumps(spec))

        again = dra.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=[claim]),
                                         timeout=10)
        check("prepare again (the kubelet retries): the same answer, the API server not asked",
              again.claims[U2] == r and len(gets) == 1, str(again))

        bad = [v1.Claim(namespace="default", name="stale", uid="eeeeeeee-0000"),
               v1.Claim(namespace="default", name="other-driver",
                        uid="bbbbbbbb-0000-0000-0000-000000000000"),
               v1.Claim(namespace="default", name="two-requests",
                        uid="cccccccc-0000-0000-0000-000000000000"),
               v1.Claim(namespace="default", name="x", uid="../../etc/passwd"),
               v1.Claim(namespace="default", name="missing", uid="ffffffff-0000")]
        resp = dra.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=bad), timeout=10)
        errs = {c.uid: resp.claims[c.uid].error for c in bad}
        expect = {"eeeeeeee-0000": "has UID aaaaaaaa-0000-0000-0000-000000000000, not",
                  "bbbbbbbb-0000-0000-0000-000000000000": "no device of driver rgpu.example.org",
                  "cccccccc-0000-0000-0000-000000000000": "in 2 requests (a, b)",
                  "../../etc/passwd": "not a valid namespace, name and UID",
                  "ffffffff-0000": "HTTP 404"}
        for uid, frag in expect.items():
            check("refused, with the reason: %s -> ...%s..." % (uid, frag), frag in errs[uid],
                  errs[uid])
        check("... none of them has devices or a CDI spec",
              all(not resp.claims[c.uid].devices for c in bad) and
              sorted(os.listdir(cdidir)) == [os.path.basename(path)], os.listdir(cdidir))

    with grpc.insecure_channel("unix:" + info.endpoint) as ch:
        dra = v1beta1_grpc.DRAPluginStub(ch)
        resp = dra.NodePrepareResources(v1beta1.NodePrepareResourcesRequest(
            claims=[v1beta1.Claim(namespace="team-b", name="job-b-rgpu", uid=U1)]), timeout=10)
        r = resp.claims[U1]
        p1 = os.path.join(cdidir, "%s-%s.json" % (DRIVER, U1))
        env = json.load(open(p1))["devices"][0]["containerEdits"]["env"] \
            if os.path.exists(p1) else []
        check("v1beta1 prepare of a claim of 1 device: its CDI id, RGPU_GPUS=1",
              r.error == "" and [list(d.cdi_device_ids) for d in r.devices] ==
              [["%s/gpu=%s" % (DRIVER, U1)]] and "RGPU_GPUS=1" in env, "%s %s" % (r, env))
        resp = dra.NodePrepareResources(v1beta1.NodePrepareResourcesRequest(
            claims=[v1beta1.Claim(namespace="default", name="third",
                                  uid="dddddddd-0000-0000-0000-000000000000")]), timeout=10)
        e = resp.claims["dddddddd-0000-0000-0000-000000000000"].error
        check("a third claim beyond --max-claims 2 is refused", "its limit (--max-claims)" in e, e)

    with grpc.insecure_channel("unix:" + info.endpoint) as ch:
        dra = v1_grpc.DRAPluginStub(ch)
        claim = v1.Claim(namespace="default", name="job-a-rgpu", uid=U2)
        resp = dra.NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(claims=[claim]),
                                          timeout=10)
        check("unprepare: no error, the CDI spec removed",
              U2 in resp.claims and resp.claims[U2].error == "" and not os.path.exists(path),
              "%s %s" % (resp, os.listdir(cdidir)))
        resp = dra.NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(claims=[claim]),
                                          timeout=10)
        check("unprepare again: no error", U2 in resp.claims and resp.claims[U2].error == "",
              str(resp))
        resp = dra.NodePrepareResources(v1.NodePrepareResourcesRequest(
            claims=[v1.Claim(namespace="default", name="third",
                             uid="dddddddd-0000-0000-0000-000000000000")]), timeout=10)
        check("after an unprepare, a claim within the limit again is prepared",
              resp.claims["dddddddd-0000-0000-0000-000000000000"].error == "", str(resp))

    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    check("SIGTERM: exit 0, both sockets removed, the prepared claims' specs kept",
          rc == 0 and not os.path.exists(regsock) and
          not os.path.exists(os.path.join(plugdir, "dra.sock")) and os.path.exists(p1),
          "rc %s, %s %s" % (rc, os.listdir(regdir), os.listdir(cdidir)))
    log.flush()
    log.seek(0)
    text = log.read()
    check("the log says each prepare, unprepare and refusal once",
          text.count("prepared claim default/job-a-rgpu (UID %s): 2 GPU(s)" % U2) == 1 and
          text.count("unprepared claim default/job-a-rgpu") == 2 and
          text.count("registered with the kubelet") == 1 and
          text.count("ERROR: prepare claim") == 6, "")


if __name__ == "__main__":
    sys.exit(main())
