#!/usr/bin/env python3
"""rgpu's DRA kubelet plugin (deploy/kubernetes/pool, docs/pool.md "Slurm and Kubernetes").

The kubelet prepares every ResourceClaim allocated to a pod through the plugin of the claim's
driver before it starts the pod's containers. This plugin, one per node (nodeplugin.yaml):

- registers with the kubelet: a Registration gRPC service on a socket in the kubelet's plugin
  registry (--registry-dir) answering GetInfo with type DRAPlugin, the driver's name, its own
  endpoint (--plugin-dir/dra.sock) and the DRA services it serves, newest first:
  v1.DRAPlugin (kubelets of 1.34 and later) and v1beta1.DRAPlugin (1.32, 1.33);
- NodePrepareResources: reads the claim from the API server (the kubelet sends only its
  namespace, name and UID), counts the devices of this driver allocated to it and writes a CDI
  spec (--cdi-dir, kind rgpu.example.org/gpu) with one device named after the claim's UID whose
  edits give the container RGPU_POOL (the pool of the node plugin's ConfigMap), RGPU_GPUS (the
  claim's device count) and, when --client-dir holds the client (lib/rgpu/libcuda.so.1), that
  directory mounted read-only at --client-mount with RGPU_LIBDIR pointing into it; answers with
  every allocated device, the CDI device on the first (one request per claim: see prepare());
- NodeUnprepareResources: removes the claim's CDI spec.

The devices are not touched: the client in the pod places itself on the pool (rgpu's own
placement), as under Slurm; the cluster's scheduler has already decided that it may run.
Bounded: at most --max-claims claims prepared at once (their CDI files included), a claim read
from the API server is at most 1 MiB and waits --api-timeout, the gRPC servers run 4 threads
and queue at most 16 calls each. Every prepare, unprepare and refusal is logged once, with the
claim's namespace/name and UID.

Stubs: generated from proto/*.proto (python3 -m grpc_tools.protoc) into --stubs.
"""
import argparse
import concurrent.futures
import errno
import json
import logging
import os
import re
import signal
import ssl
import sys
import threading
import urllib.error
import urllib.request

LOG = logging.getLogger("rgpu-dra-plugin")
UID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")  # a CDI device name, a file name
DNS_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")  # namespace, claim name
MAX_CLAIM_BYTES = 1 << 20
SERVICES = ("v1", "v1beta1")  # newest first: the kubelet takes the first it knows


class ClaimError(Exception):
    """A claim that cannot be prepared or unprepared: its message goes back to the kubelet."""


def parse_args(argv):
    p = argparse.ArgumentParser(description="rgpu DRA kubelet plugin")
    p.add_argument("--driver", default="rgpu.example.org")
    p.add_argument("--registry-dir", default="/var/lib/kubelet/plugins_registry")
    p.add_argument("--plugin-dir", default=None,
                   help="default /var/lib/kubelet/plugins/DRIVER")
    p.add_argument("--cdi-dir", default="/var/run/cdi")
    p.add_argument("--pool", default=os.environ.get("RGPU_POOL", ""),
                   help="RGPU_POOL given to the pods (default: $RGPU_POOL)")
    p.add_argument("--client-dir", default="/var/lib/rgpu/client",
                   help="host directory holding bin/rgpu and lib/rgpu/ ('' = none)")
    p.add_argument("--client-mount", default="/opt/rgpu")
    p.add_argument("--max-claims", type=int, default=1024)
    p.add_argument("--api-server", default=None,
                   help="default https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT")
    p.add_argument("--token-file", default="/var/run/secrets/kubernetes.io/serviceaccount/token")
    p.add_argument("--ca-file", default="/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
    p.add_argument("--api-timeout", type=float, default=10.0)
    p.add_argument("--stubs", default=os.environ.get("RGPU_DRA_STUBS",
                                                     os.path.join(os.path.dirname(
                                                         os.path.abspath(__file__)), "gen")))
    a = p.parse_args(argv)
    if not re.match(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$", a.driver):
        p.error("--driver %r: not a DNS subdomain" % a.driver)
    if a.plugin_dir is None:
        a.plugin_dir = os.path.join("/var/lib/kubelet/plugins", a.driver)
    if not a.pool.strip() or any(not c.isprintable() for c in a.pool) or len(a.pool) > 4096:
        p.error("--pool (or RGPU_POOL): required, printable, at most 4096 characters; got %r"
                % a.pool)
    if not 1 <= a.max_claims <= 65536:
        p.error("--max-claims %d: from 1 to 65536" % a.max_claims)
    if not 0 < a.api_timeout <= 300:
        p.error("--api-timeout %g: more than 0, at most 300 seconds" % a.api_timeout)
    if a.api_server is None:
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get(
            "KUBERNETES_SERVICE_PORT", "443")
        if not host:
            p.error("--api-server not given and KUBERNETES_SERVICE_HOST not set (not in a pod)")
        a.api_server = "https://%s:%s" % ("[%s]" % host if ":" in host else host, port)
    return a


def load_stubs(stub_dir):
    sys.path.insert(0, stub_dir)
    try:
        import pluginregistration_v1_pb2 as reg_pb2
        import pluginregistration_v1_pb2_grpc as reg_grpc
        dra = {v: (__import__("dra_%s_pb2" % v), __import__("dra_%s_pb2_grpc" % v))
               for v in SERVICES}
    except ImportError as e:
        sys.exit("rgpu-dra-plugin: the gRPC stubs in %s: %s (generate them from proto/: "
                 "python3 -m grpc_tools.protoc)" % (stub_dir, e))
    return reg_pb2, reg_grpc, dra


class ApiClient:
    """GET of one ResourceClaim from the API server, with the pod's service account token
    (read at every call: projected tokens rotate)."""

    def __init__(self, server, token_file, ca_file, timeout):
        self.server = server.rstrip("/")
        self.token_file = token_file
        self.timeout = timeout
        self.ctx = None
        if self.server.startswith("https://"):
            self.ctx = ssl.create_default_context(cafile=ca_file if os.path.exists(ca_file)
                                                  else None)

    def claim(self, namespace, name):
        url = "%s/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s" % (
            self.server, namespace, name)
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        try:
            with open(self.token_file) as f:
                req.add_header("Authorization", "Bearer " + f.read().strip())
        except OSError as e:
            raise ClaimError("service account token %s: %s" % (self.token_file, e.strerror))
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.ctx) as r:
                body = r.read(MAX_CLAIM_BYTES + 1)
        except urllib.error.HTTPError as e:
            raise ClaimError("GET %s: HTTP %d %s" % (url, e.code, e.reason))
        except (urllib.error.URLError, OSError) as e:
            raise ClaimError("GET %s: %s" % (url, getattr(e, "reason", e)))
        if len(body) > MAX_CLAIM_BYTES:
            raise ClaimError("GET %s: more than %d bytes" % (url, MAX_CLAIM_BYTES))
        try:
            return json.loads(body)
        except ValueError as e:
            raise ClaimError("GET %s: not JSON: %s" % (url, e))


class Plugin:
    """The prepared claims (UID -> the devices answered, or None for a CDI file found at start)
    and their CDI files: one owner for both, under one lock."""

    def __init__(self, args, api):
        self.a = args
        self.api = api
        self.cdi_kind = args.driver + "/gpu"
        self.lock = threading.Lock()
        self.claims = {}
        self.client = None
        lib = os.path.join(args.client_dir, "lib", "rgpu", "libcuda.so.1") if args.client_dir \
            else None
        if lib and os.path.exists(lib):
            self.client = args.client_dir
            LOG.info("client files: %s, mounted at %s in every container of a claim",
                     args.client_dir, args.client_mount)
        else:
            LOG.warning("client files: %s absent: pods must carry the client themselves "
                        "(RGPU_POOL and RGPU_GPUS are still given)", lib or "--client-dir ''")
        os.makedirs(args.cdi_dir, exist_ok=True)
        prefix = args.driver + "-"
        for f in sorted(os.listdir(args.cdi_dir)):
            if f.startswith(prefix) and f.endswith(".json") and UID_RE.match(f[len(prefix):-5]):
                self.claims[f[len(prefix):-5]] = None
        if self.claims:
            LOG.info("%d claim(s) prepared before this start (their CDI specs are in %s)",
                     len(self.claims), args.cdi_dir)

    def spec_path(self, uid):
        return os.path.join(self.a.cdi_dir, "%s-%s.json" % (self.a.driver, uid))

    def spec(self, uid, count):
        env = ["RGPU_POOL=" + self.a.pool, "RGPU_GPUS=%d" % count]
        edits = {"env": env}
        if self.client:
            env.append("RGPU_LIBDIR=" + os.path.join(self.a.client_mount, "lib", "rgpu"))
            edits["mounts"] = [{"hostPath": self.client, "containerPath": self.a.client_mount,
                                "options": ["ro", "nosuid", "nodev", "bind"]}]
        return {"cdiVersion": "0.3.0", "kind": self.cdi_kind,
                "devices": [{"name": uid, "containerEdits": edits}]}

    def write_spec(self, uid, spec):
        path = self.spec_path(uid)
        tmp = path + ".tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(spec, f, indent=2)
                f.write("\n")
            os.chmod(tmp, 0o644)
            os.rename(tmp, path)  # the runtime never reads half a spec
        except OSError as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise ClaimError("writing the CDI spec %s: %s" % (path, e.strerror))

    def results(self, ns, name, uid):
        """This driver's allocation results of the claim, as the API server has them."""
        claim = self.api.claim(ns, name)
        got = (claim.get("metadata") or {}).get("uid")
        if got != uid:
            raise ClaimError("the API server's claim %s/%s has UID %s, not %s (deleted and "
                             "created again?)" % (ns, name, got, uid))
        alloc = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        ours = [r for r in alloc.get("results") or [] if r.get("driver") == self.a.driver]
        if not ours:
            raise ClaimError("claim %s/%s has no device of driver %s allocated"
                             % (ns, name, self.a.driver))
        requests = {(r.get("request") or "").split("/")[0] for r in ours}
        if len(requests) > 1:
            # RGPU_GPUS is one number per container: two requests of one claim would give a
            # container that uses one of them the other's count too.
            raise ClaimError("claim %s/%s asks %s for devices in %d requests (%s): rgpu takes "
                             "one request per claim (use its count)" % (
                                 ns, name, self.a.driver, len(requests),
                                 ", ".join(sorted(requests))))
        for r in ours:
            if not r.get("pool") or not r.get("device"):
                raise ClaimError("claim %s/%s: an allocation result without pool or device"
                                 % (ns, name))
        return ours

    def prepare(self, ns, name, uid):
        """The devices (request, pool, device, CDI ids) of one claim, prepared."""
        if not UID_RE.match(uid) or not DNS_RE.match(ns) or not DNS_RE.match(name):
            raise ClaimError("claim %r/%r UID %r: not a valid namespace, name and UID"
                             % (ns, name, uid))
        with self.lock:
            done = self.claims.get(uid)
            if done is not None:
                return done  # the kubelet asks again after its restart: same answer
            if uid not in self.claims and len(self.claims) >= self.a.max_claims:
                raise ClaimError("this node holds %d prepared claims, its limit (--max-claims)"
                                 % len(self.claims))
        ours = self.results(ns, name, uid)  # outside the lock: the API server may be slow
        cdi_id = "%s=%s" % (self.cdi_kind, uid)
        devices = [(r["request"], r["pool"], r["device"], [cdi_id] if i == 0 else [])
                   for i, r in enumerate(ours)]
        with self.lock:
            if uid not in self.claims and len(self.claims) >= self.a.max_claims:
                raise ClaimError("this node holds %d prepared claims, its limit (--max-claims)"
                                 % len(self.claims))
            self.write_spec(uid, self.spec(uid, len(ours)))
            self.claims[uid] = devices
        LOG.info("prepared claim %s/%s (UID %s): %d GPU(s) %s, CDI device %s", ns, name, uid,
                 len(ours), ",".join("%s/%s" % (d[1], d[2]) for d in devices), cdi_id)
        return devices

    def unprepare(self, ns, name, uid):
        if not UID_RE.match(uid):
            raise ClaimError("claim UID %r: not a valid UID" % uid)
        with self.lock:
            try:
                os.unlink(self.spec_path(uid))
            except OSError as e:
                if e.errno != errno.ENOENT:
                    raise ClaimError("removing the CDI spec %s: %s"
                                     % (self.spec_path(uid), e.strerror))
            held = self.claims.pop(uid, False) is not False
        LOG.info("unprepared claim %s/%s (UID %s)%s", ns, name, uid,
                 "" if held else ": was not prepared here (nothing to undo)")


def dra_servicer(plugin, pb2, grpc_mod):
    class Servicer(grpc_mod.DRAPluginServicer):
        def NodePrepareResources(self, request, context):
            resp = pb2.NodePrepareResourcesResponse()
            for c in request.claims:
                out = resp.claims[c.uid]
                try:
                    for req, pool, dev, ids in plugin.prepare(c.namespace, c.name, c.uid):
                        out.devices.add(request_names=[req], pool_name=pool, device_name=dev,
                                        cdi_device_ids=ids)
                except ClaimError as e:
                    LOG.error("prepare claim %s/%s (UID %s): %s", c.namespace, c.name, c.uid, e)
                    del out.devices[:]
                    out.error = str(e)
            return resp

        def NodeUnprepareResources(self, request, context):
            resp = pb2.NodeUnprepareResourcesResponse()
            for c in request.claims:
                out = resp.claims[c.uid]
                try:
                    plugin.unprepare(c.namespace, c.name, c.uid)
                except ClaimError as e:
                    LOG.error("unprepare claim %s/%s (UID %s): %s", c.namespace, c.name, c.uid,
                              e)
                    out.error = str(e)
            return resp
    return Servicer()


def reg_servicer(args, endpoint, reg_pb2, reg_grpc):
    class Servicer(reg_grpc.RegistrationServicer):
        def GetInfo(self, request, context):
            return reg_pb2.PluginInfo(type="DRAPlugin", name=args.driver, endpoint=endpoint,
                                      supported_versions=["%s.DRAPlugin" % v for v in SERVICES])

        def NotifyRegistrationStatus(self, request, context):
            if request.plugin_registered:
                LOG.info("registered with the kubelet as %s (endpoint %s)", args.driver,
                         endpoint)
            else:
                LOG.error("the kubelet refused the registration: %s", request.error)
            return reg_pb2.RegistrationStatusResponse()
    return Servicer()


def serve(path):
    import grpc
    try:
        os.unlink(path)  # a socket left by an earlier instance
    except FileNotFoundError:
        pass
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4),
                         maximum_concurrent_rpcs=16,
                         options=[("grpc.max_receive_message_length", 4 << 20)])
    if server.add_insecure_port("unix:" + path) == 0:
        sys.exit("rgpu-dra-plugin: cannot listen on %s" % path)
    return server


def main(argv=None):
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="rgpu-dra-plugin %(levelname)s: %(message)s")
    args = parse_args(argv)
    reg_pb2, reg_grpc, dra = load_stubs(args.stubs)
    os.makedirs(args.registry_dir, exist_ok=True)
    os.makedirs(args.plugin_dir, exist_ok=True)
    plugin = Plugin(args, ApiClient(args.api_server, args.token_file, args.ca_file,
                                    args.api_timeout))
    endpoint = os.path.join(args.plugin_dir, "dra.sock")
    reg_path = os.path.join(args.registry_dir, args.driver + "-reg.sock")

    # The DRA endpoint first: the kubelet connects to it as soon as it has read the registration.
    dra_server = serve(endpoint)
    for v, (pb2, grpc_mod) in dra.items():
        grpc_mod.add_DRAPluginServicer_to_server(dra_servicer(plugin, pb2, grpc_mod), dra_server)
    dra_server.start()
    reg_server = serve(reg_path)
    reg_grpc.add_RegistrationServicer_to_server(reg_servicer(args, endpoint, reg_pb2, reg_grpc),
                                                reg_server)
    reg_server.start()
    LOG.info("driver %s: registration %s, endpoint %s (services %s), CDI specs in %s, "
             "pool %s, at most %d claims", args.driver, reg_path, endpoint,
             ", ".join("%s.DRAPlugin" % v for v in SERVICES), args.cdi_dir, args.pool,
             args.max_claims)

    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    stop.wait()
    # The registration socket goes first: its removal is what tells the kubelet the plugin
    # left. The CDI specs stay: their claims are still prepared for the pods running.
    LOG.info("stopping: removing %s and %s", reg_path, endpoint)
    reg_server.stop(None)
    for p in (reg_path, endpoint):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    dra_server.stop(5).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
