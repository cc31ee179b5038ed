#!/usr/bin/env python3
"""Check contrib/kubernetes/ offline: the manifests against the Kubernetes
schemas (kubernetes-validate, strict), the gateway config they ship through
`hopgate validate`, and the manifests against that config — probe paths and
ports, listener ports, secrets for the env variables the config names,
grace periods against the shutdown timeouts, the headless Service the DNS
discovery names, the backends' preStop against the DNS refresh bound.

    python3 scripts/check-kubernetes.py [--hopgate BIN] [--dir DIR]
    python3 scripts/check-kubernetes.py --self-test

--self-test breaks the shipped manifests in memory, one mistake at a time,
and fails unless every mistake is reported: the checks themselves can fail.
"""

import argparse
import copy
import ipaddress
import os
import re
import subprocess
import sys
import tempfile

import yaml

SCHEMA_VERSIONS = ["1.30.0", "1.37.0"]  # the sleep preStop action needs 1.30
MARGIN_S = 5  # what the grace period keeps beyond the gateway's own bounds
DNS_SLACK_S = 2  # what a backend's preStop keeps beyond refresh_max
DRAIN_DEADLINE_DEFAULT_S = 30


def seconds(text):
    """A hopgate duration (`250ms`, `5s`, `2m`, `1h`) in seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*", str(text))
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    value, unit = float(m.group(1)), m.group(2)
    return value * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


def load(directory):
    docs = []
    for name in sorted(os.listdir(directory)):
        if name.endswith((".yaml", ".yml")):
            with open(os.path.join(directory, name)) as f:
                docs += [d for d in yaml.safe_load_all(f) if d]
    return docs


def find(docs, kind, name=None):
    return [d for d in docs if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)]


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def container_port(container, port):
    """The number a probe's or Service's `port` (name or number) means."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    return None


def prestop_sleep(container):
    sleep = container.get("lifecycle", {}).get("preStop", {}).get("sleep")
    return sleep["seconds"] if sleep else 0


def address_port(address):
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class Checker:
    def __init__(self, docs):
        self.docs = docs
        self.errors = []

    def error(self, where, message):
        self.errors.append(f"{where}: {message}")

    def gateway(self):
        """(config map, key, config dict, deployment, container) of the gateway."""
        for dep in find(self.docs, "Deployment"):
            for c in dep["spec"]["template"]["spec"]["containers"]:
                args = c.get("args", [])
                if "run" in args and "--config" in args:
                    path = args[args.index("--config") + 1]
                    return dep, c, path
        self.error("Deployment", "no container runs `hopgate run --config FILE`")
        return None

    def config_of(self, dep, container, path):
        spec = dep["spec"]["template"]["spec"]
        mount_dir, key = os.path.split(path)
        mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == mount_dir]
        where = f"Deployment/{dep['metadata']['name']}"
        if not mounts:
            self.error(where, f"--config {path}: nothing is mounted at {mount_dir}")
            return None, None
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        volume = volumes.get(mounts[0]["name"], {})
        cm_name = volume.get("configMap", {}).get("name")
        cms = find(self.docs, "ConfigMap", cm_name)
        if not cms or key not in cms[0].get("data", {}):
            self.error(where, f"--config {path}: no ConfigMap {cm_name!r} with key {key!r} mounted there")
            return None, None
        return cms[0], yaml.safe_load(cms[0]["data"][key])

    def check(self):
        found = self.gateway()
        if not found:
            return self.errors
        dep, container, path = found
        cm, config = self.config_of(dep, container, path)
        if config is None:
            return self.errors
        self.check_probes(dep, container, config)
        self.check_ports(dep, container, config)
        self.check_secrets(dep, container, config)
        self.check_grace(dep, container, config)
        self.check_rollout(dep)
        for i, svc in enumerate(config.get("services", [])):
            dns = (svc.get("discovery") or {}).get("dns")
            if dns:
                self.check_discovery(f"services[{i}].discovery.dns", dns, svc, dep)
        return self.errors

    def check_probes(self, dep, container, config):
        where = f"Deployment/{dep['metadata']['name']}"
        admin = config.get("admin") or {}
        host, port = address_port(admin.get("address", "127.0.0.1:9901"))
        if ipaddress.ip_address(host).is_loopback:
            self.error(where, f"admin.address {admin.get('address')} is loopback: the kubelet's probes cannot reach it")
        for probe, want in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
            get = container.get(probe, {}).get("httpGet")
            if not get:
                self.error(where, f"{probe}: missing (want httpGet {want} on the admin port {port})")
                continue
            if get.get("path") != want:
                self.error(where, f"{probe}.httpGet.path is {get.get('path')!r}, want {want!r}")
            if container_port(container, get.get("port")) != port:
                self.error(where, f"{probe}.httpGet.port {get.get('port')!r} is not the admin port {port}")

    def check_ports(self, dep, container, config):
        where = f"Deployment/{dep['metadata']['name']}"
        declared = {p["containerPort"] for p in container.get("ports", [])}
        listener_ports = set()
        for i, listener in enumerate(config.get("listeners", [])):
            _, port = address_port(listener["address"])
            listener_ports.add(port)
            if port not in declared:
                self.error(where, f"listeners[{i}] port {port} is not a containerPort")
        labels = dep["spec"]["template"]["metadata"].get("labels", {})
        for svc in find(self.docs, "Service"):
            if not labels_match(svc["spec"].get("selector"), labels):
                continue
            for p in svc["spec"].get("ports", []):
                target = container_port(container, p.get("targetPort", p["port"]))
                if target not in listener_ports:
                    self.error(f"Service/{svc['metadata']['name']}", f"targetPort {p.get('targetPort')!r} is no listener's port")

    def check_secrets(self, dep, container, config):
        where = f"Deployment/{dep['metadata']['name']}"
        env = {e["name"]: e for e in container.get("env", [])}
        for field, var in (
            ("admin.token_env", (config.get("admin") or {}).get("token_env")),
            ("sessions.secret_env", (config.get("sessions") or {}).get("secret_env")),
        ):
            if var is None:
                if field == "admin.token_env":
                    self.error(where, "admin.token_env is unset: an admin listener off loopback needs it")
                continue
            if "secretKeyRef" not in env.get(var, {}).get("valueFrom", {}):
                self.error(where, f"{field} names {var}, which is not set from a Secret")

    def check_grace(self, dep, container, config):
        where = f"Deployment/{dep['metadata']['name']}"
        timeouts = config.get("timeouts") or {}
        delay = seconds(timeouts.get("shutdown_delay", "2s"))
        shutdown = seconds(timeouts.get("shutdown", "30s"))
        sleep = prestop_sleep(container)
        grace = dep["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
        need = sleep + delay + shutdown + MARGIN_S
        if grace < need:
            self.error(
                where,
                f"terminationGracePeriodSeconds {grace} < preStop sleep {sleep} + shutdown_delay {delay:g}"
                f" + shutdown {shutdown:g} + {MARGIN_S}: the kubelet would kill in-flight requests",
            )
        if sleep + delay == 0:
            self.error(where, "neither a preStop sleep nor timeouts.shutdown_delay: clients are refused while endpoints update")

    def check_rollout(self, dep):
        where = f"Deployment/{dep['metadata']['name']}"
        spec = dep["spec"]
        labels = spec["template"]["metadata"].get("labels", {})
        if not labels_match(spec["selector"].get("matchLabels"), labels):
            self.error(where, "spec.selector does not match the pod template's labels")
        rolling = spec.get("strategy", {}).get("rollingUpdate", {})
        if rolling.get("maxUnavailable", "25%") not in (0, "0%"):
            self.error(where, "strategy.rollingUpdate.maxUnavailable must be 0: a rollout adds a pod before it removes one")
        pdbs = [p for p in find(self.docs, "PodDisruptionBudget") if labels_match(p["spec"]["selector"].get("matchLabels"), labels)]
        if not pdbs:
            self.error(where, "no PodDisruptionBudget selects the gateway's pods")

    def check_discovery(self, field, dns, svc, gateway_dep):
        m = re.fullmatch(r"([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local\.?", dns.get("name", ""))
        if not m:
            self.error(field, f"name {dns.get('name')!r} is not <service>.<namespace>.svc.cluster.local")
            return
        name, namespace = m.groups()
        services = [s for s in find(self.docs, "Service", name) if s["metadata"].get("namespace") == namespace]
        if not services:
            self.error(field, f"no Service {name} in namespace {namespace} among the manifests")
            return
        service = services[0]
        where = f"Service/{name}"
        if service["spec"].get("clusterIP") != "None":
            self.error(where, "not headless (clusterIP: None): DNS would give one virtual IP, not the pods")
        ports = service["spec"].get("ports", [])
        port = next((p for p in ports if p["port"] == dns.get("port")), None)
        if port is None:
            self.error(field, f"port {dns.get('port')} is not a port of Service/{name}")
        backends = [
            d
            for d in find(self.docs, "Deployment")
            if labels_match(service["spec"].get("selector"), d["spec"]["template"]["metadata"].get("labels", {}))
        ]
        if not backends:
            self.error(where, "its selector matches no Deployment")
            return
        refresh_max = seconds(dns.get("refresh_max", "30s"))
        deadline = seconds((svc.get("drain") or {}).get("deadline", f"{DRAIN_DEADLINE_DEFAULT_S}s"))
        for backend in backends:
            bwhere = f"Deployment/{backend['metadata']['name']}"
            spec = backend["spec"]["template"]["spec"]
            container = spec["containers"][0]
            if port is not None and container_port(container, port.get("targetPort", port["port"])) is None:
                self.error(where, f"targetPort {port.get('targetPort')!r} is no port of {bwhere}")
            sleep = prestop_sleep(container)
            if sleep < refresh_max + DNS_SLACK_S:
                self.error(
                    bwhere,
                    f"preStop sleep {sleep} < refresh_max {refresh_max:g} + {DNS_SLACK_S}: the gateway may still"
                    " send new requests to a pod that stopped",
                )
            grace = spec.get("terminationGracePeriodSeconds", 30)
            if grace < refresh_max + deadline + MARGIN_S:
                self.error(
                    bwhere,
                    f"terminationGracePeriodSeconds {grace} < refresh_max {refresh_max:g} + drain.deadline"
                    f" {deadline:g} + {MARGIN_S}: streams would be cut before the drain ends them",
                )


def schema_check(directory):
    files = sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith((".yaml", ".yml")))
    ok = True
    for version in SCHEMA_VERSIONS:
        r = subprocess.run(["kubernetes-validate", "--strict", "--quiet", "-k", version, *files])
        ok &= r.returncode == 0
    return ok


def validate_config(docs, hopgate):
    checker = Checker(docs)
    dep, container, path = checker.gateway()
    _, config = checker.config_of(dep, container, path)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(config, f)
    try:
        r = subprocess.run([hopgate, "validate", f.name])
    finally:
        os.unlink(f.name)
    return r.returncode == 0


# --self-test: one mistake each; every one must be reported.
def _gw(docs):
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "hopgate")
    return dep, dep["spec"]["template"]["spec"]["containers"][0]


def _app(docs):
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "app")
    return dep, dep["spec"]["template"]["spec"]["containers"][0]


def _config_edit(edit):
    def apply(docs):
        cm = next(d for d in docs if d["kind"] == "ConfigMap")
        config = yaml.safe_load(cm["data"]["hopgate.yaml"])
        edit(config)
        cm["data"]["hopgate.yaml"] = yaml.safe_dump(config)

    return apply


MISTAKES = {
    "readiness probe on another path": lambda d: _gw(d)[1]["readinessProbe"]["httpGet"].update(path="/healthz"),
    "readiness probe on the traffic port": lambda d: _gw(d)[1]["readinessProbe"]["httpGet"].update(port="http"),
    "liveness probe missing": lambda d: _gw(d)[1].pop("livenessProbe"),
    "admin on loopback": _config_edit(lambda c: c["admin"].update(address="127.0.0.1:9901")),
    "grace shorter than shutdown": lambda d: _gw(d)[0]["spec"]["template"]["spec"].update(terminationGracePeriodSeconds=20),
    "shutdown longer than grace": _config_edit(lambda c: c["timeouts"].update(shutdown="60s")),
    "no preStop and no shutdown_delay": lambda d: _gw(d)[1].pop("lifecycle"),
    "admin token not from a Secret": lambda d: _gw(d)[1].update(env=[e for e in _gw(d)[1]["env"] if e["name"] != "HOPGATE_ADMIN_TOKEN"]),
    "listener port not exposed": _config_edit(lambda c: c["listeners"][0].update(address="0.0.0.0:8443")),
    "PDB selects nothing": lambda d: next(x for x in d if x["kind"] == "PodDisruptionBudget")["spec"]["selector"].update(
        matchLabels={"app.kubernetes.io/name": "other"}
    ),
    "rollout may remove first": lambda d: _gw(d)[0]["spec"]["strategy"]["rollingUpdate"].update(maxUnavailable=1),
    "DNS name in another namespace": _config_edit(
        lambda c: c["services"][0]["discovery"]["dns"].update(name="app.other.svc.cluster.local")
    ),
    "DNS port not the Service's": _config_edit(lambda c: c["services"][0]["discovery"]["dns"].update(port=9000)),
    "backend Service not headless": lambda d: next(
        x for x in d if x["kind"] == "Service" and x["metadata"]["name"] == "app"
    )["spec"].pop("clusterIP"),
    "backend stops before DNS catches up": lambda d: _app(d)[1]["lifecycle"]["preStop"]["sleep"].update(seconds=3),
    "backend grace shorter than the drain": lambda d: _app(d)[0]["spec"]["template"]["spec"].update(
        terminationGracePeriodSeconds=15
    ),
    "config mounted elsewhere": lambda d: _gw(d)[1].update(args=["run", "--config", "/etc/other/hopgate.yaml"]),
}


def self_test(directory):
    base = load(directory)
    errors = Checker(copy.deepcopy(base)).check()
    if errors:
        print("self-test: the shipped manifests already fail:", *errors, sep="\n  ")
        return False
    ok = True
    for name, mistake in MISTAKES.items():
        docs = copy.deepcopy(base)
        mistake(docs)
        found = Checker(docs).check()
        print(f"self-test: {name}: {'caught: ' + found[0] if found else 'MISSED'}")
        ok &= bool(found)
    return ok


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default=os.path.join(here, "..", "contrib", "kubernetes"))
    p.add_argument("--hopgate", default=os.path.join(here, "..", "target", "debug", "hopgate"))
    p.add_argument("--self-test", action="store_true")
    args = p.parse_args()
    if args.self_test:
        sys.exit(0 if self_test(args.dir) else 1)
    docs = load(args.dir)
    ok = schema_check(args.dir)
    errors = Checker(docs).check()
    for e in errors:
        print(f"check-kubernetes: {e}")
    ok &= not errors
    ok &= validate_config(docs, args.hopgate)
    print("check-kubernetes: ok" if ok else "check-kubernetes: FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
