#!/usr/bin/env python3
"""Replication with Litestream, measured (docs/operations.md, "Continuous replication (Litestream)").

    scripts/replication-measure.py lag      SHARDLITE LITESTREAM [--partitions 256] [--rate 5000] [--seconds 60]
    scripts/replication-measure.py shutdown SHARDLITE LITESTREAM [--partitions 256] [--litestream-flag]

`lag`: `shardlite serve --litestream` on a new directory under /tmp, `litestream replicate` with the
config of `shardlite litestream-config` (a local replica directory), `shardlite bench --url ...
--workloads insert --rate R` as the load (durable PUTs: the default synchronous=full). Meanwhile a
probe, over and over: takes a key the load wrote to a random partition (`GET /keys`), PUTs a marker
value (24 random bytes) to it, then waits until the replica holds it. The lag of one probe: from
the marker's acknowledgement to the moment the probe saw the marker in the replica.
`--probe ltx` (the default) reads every replica file of that partition (Litestream's `.ltx`
files, each written whole before it gets that name) written since, every 10 ms, for the marker's
bytes (random bytes are not compressed away), and every tenth probe confirms it with
`litestream restore` (the restored partition must hold the marker: counted and printed).
`--probe restore` restores the partition every 50 ms until it holds the marker instead: its lag
includes a restore's own time, and the restores, a process each, take a share of the two cores
from Litestream and the server. Also: Litestream's CPU time and RSS over the load (from /proc), then a lost disk
(server and Litestream SIGKILLed, data deleted) and `shardlite restore --from-litestream`, timed.

`shutdown`: the same server with Litestream attached, 2,000 PUTs, then SIGTERM: seconds to exit.

Every process started is killed at the end; everything lives under one temporary directory, removed.
"""
import argparse, json, os, random, shutil, signal, sqlite3, subprocess, sys, tempfile, threading, time, urllib.request


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http(method, url, body=None):
    req = urllib.request.Request(url, data=body, method=method)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read()


def start_server(exe, data, partitions, extra, log):
    port = free_port()
    proc = subprocess.Popen([exe, "serve", "--data", data, "--listen", f"127.0.0.1:{port}",
                             "--partitions", str(partitions)] + extra,
                            stdout=log, stderr=log, env={**os.environ, "RUST_LOG": "info"})
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if http("GET", url + "/healthz")[0] == 200:
                return proc, url
        except Exception:
            time.sleep(0.05)
    raise SystemExit("the server did not start")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def restored_value(litestream, config, data, p, key, tmp):
    """The value of `key` in partition `p` restored from its replica now (None if absent or if the
    restore fails), and the restore's seconds."""
    out = os.path.join(tmp, "probe.db")
    for f in (out, out + "-wal", out + "-shm"):
        if os.path.exists(f):
            os.remove(f)
    began = time.monotonic()
    r = subprocess.run([litestream, "restore", "-config", config, "-o", out, os.path.join(data, f"p{p:04}.db")],
                       capture_output=True)
    took = time.monotonic() - began
    if r.returncode != 0:
        return None, took
    conn = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    row = conn.execute("SELECT value FROM records WHERE key = ?", (bytes.fromhex(key),)).fetchone()
    conn.close()
    return (row[0] if row else None), took


def ltx_holding(replica, p, marker, seen):
    """Whether a replica file of partition `p` written since `seen` was filled holds `marker`'s
    bytes; `seen` keeps each file already read (by name and size), so each is read once."""
    for root, _, files in os.walk(os.path.join(replica, f"p{p:04}")):
        for name in files:
            if not name.endswith(".ltx"):
                continue
            path = os.path.join(root, name)
            try:
                size = os.path.getsize(path)
                if (path, size) in seen:
                    continue
                seen.add((path, size))
                with open(path, "rb") as f:
                    if marker in f.read():
                        return True
            except FileNotFoundError:  # compacted away meanwhile
                continue
    return False


def probe(args, url, config, data, replica, tmp, stop, stats):
    """Over and over: PUT a marker to a key of a random partition, then wait until the replica
    holds it. `--probe ltx` (default) looks for the marker's bytes in the partition's replica
    files every 10 ms, and every tenth probe confirms with a restore that the restored partition
    holds the marker; `--probe restore` restores the partition until it does."""
    rnd = random.Random(1)
    n = 0
    while not stop.is_set():
        p = rnd.randrange(args.partitions)
        _, body = http("GET", f"{url}/keys?partition={p}&limit=1")
        keys = json.loads(body).get("keys", [])
        if not keys:
            time.sleep(0.1)
            continue
        key = keys[0]["key"]
        # Random bytes: Litestream's compression cannot match them against other data, so they
        # appear as they are in the replica file that carries them.
        marker = os.urandom(24)
        n += 1
        seen = set()
        if args.probe == "ltx":
            ltx_holding(replica, p, marker, seen)  # notes every file there before the marker
        http("PUT", f"{url}/kv/{key}", marker)
        acked = time.monotonic()
        while not stop.is_set():
            if args.probe == "ltx":
                if ltx_holding(replica, p, marker, seen):
                    stats["lags"].append(time.monotonic() - acked)
                    if n % 10 == 0:
                        value, took = restored_value(args.litestream, config, data, p, key, tmp)
                        stats["restores"].append(took)
                        stats["confirmed" if value == marker else "unconfirmed"] += 1
                    break
                time.sleep(0.01)
            else:
                value, took = restored_value(args.litestream, config, data, p, key, tmp)
                stats["restores"].append(took)
                if value == marker:
                    stats["lags"].append(time.monotonic() - acked)
                    break
                time.sleep(0.05)


class Setup:
    """A new data directory under a temporary one, served by `args.shardlite` (with `serve_flags`), its
    Litestream config (written by `args.tools`, else `args.shardlite`) and `litestream replicate`.
    Every process is killed and the directory removed on leaving."""

    def __init__(self, args, serve_flags):
        self.tmp = tempfile.mkdtemp(prefix="replication-measure-")
        self.data, self.replica, self.config = (os.path.join(self.tmp, d) for d in ("data", "replica", "litestream.yml"))
        self.log_path = os.path.join(self.tmp, "server.log")
        self.log = open(self.log_path, "w")
        self.procs = []
        self.args, self.serve_flags = args, serve_flags

    def __enter__(self):
        a = self.args
        self.server, self.url = start_server(a.shardlite, self.data, a.partitions, self.serve_flags, self.log)
        self.procs.append(self.server)
        subprocess.run([a.tools or a.shardlite, "litestream-config", "--data", self.data, "--replica", self.replica,
                        "--out", self.config]
                       + sum((["--db-set", s] for s in a.db_set), [])
                       + sum((["--replica-set", s] for s in a.replica_set), []), check=True)
        self.litestream = subprocess.Popen([a.litestream, "replicate", "-config", self.config],
                                           stdout=open(os.path.join(self.tmp, "litestream.log"), "w"),
                                           stderr=subprocess.STDOUT)
        self.procs.append(self.litestream)
        return self

    def __exit__(self, *exc):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def lag(args):
    with Setup(args, ["--litestream"]) as setup:
        tmp, data, replica, config = setup.tmp, setup.data, setup.replica, setup.config
        server, url, ls, procs = setup.server, setup.url, setup.litestream, setup.procs
        time.sleep(5)
        idle0, t0 = cpu_seconds(ls.pid), time.monotonic()
        time.sleep(10)
        idle_cpu = (cpu_seconds(ls.pid) - idle0) / (time.monotonic() - t0)
        idle_rss = rss_mb(ls.pid)
        bench = subprocess.Popen([args.shardlite, "bench", "--url", url, "--pid", str(server.pid), "--workloads",
                                  "insert", "--rate", str(args.rate), "--duration", str(args.seconds), "--warmup", "3",
                                  "--concurrency", "64"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        procs.append(bench)
        time.sleep(5)
        stop = threading.Event()
        stats = {"lags": [], "restores": [], "confirmed": 0, "unconfirmed": 0}
        prober = threading.Thread(target=probe, args=(args, url, config, data, replica, tmp, stop, stats))
        cpu0, t0, rss_max = cpu_seconds(ls.pid), time.monotonic(), 0.0
        prober.start()
        while bench.poll() is None and time.monotonic() - t0 < args.seconds - 3:
            rss_max = max(rss_max, rss_mb(ls.pid))
            time.sleep(1)
        busy_cpu = (cpu_seconds(ls.pid) - cpu0) / (time.monotonic() - t0)
        stop.set()
        prober.join()
        report = bench.communicate()[0].decode()
        print(report)
        lags, restores = stats["lags"], stats["restores"]
        print(f"partitions {args.partitions}, open-loop rate {args.rate} PUT/s; {len(lags)} lag probes "
              f"(--probe {args.probe}): p50 {pct(lags, 50):.3f} s, p99 {pct(lags, 99):.3f} s, max {max(lags):.3f} s")
        if args.probe == "ltx":
            print(f"restores confirming a probe: {stats['confirmed']} held the marker, "
                  f"{stats['unconfirmed']} did not (restore p50 {pct(restores, 50) if restores else 0:.3f} s)")
        else:
            print(f"(each lag includes one restore of a partition: p50 {pct(restores, 50):.3f} s)")
        print(f"litestream: idle {idle_cpu * 100:.1f}% of a core, RSS {idle_rss:.0f} MB; "
              f"under load {busy_cpu * 100:.1f}% of a core, RSS up to {rss_max:.0f} MB")
        # A lost disk: both die, the data goes, the replica restores.
        for proc in (ls, server):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        shutil.rmtree(data)
        began = time.monotonic()
        r = subprocess.run([args.shardlite, "restore", "--from-litestream", config, "--data",
                            os.path.join(tmp, "restored"), "--litestream-bin", args.litestream],
                           capture_output=True, text=True)
        print(f"restore: {time.monotonic() - began:.1f} s, exit {r.returncode}: {r.stdout.strip()} {r.stderr.strip()[-2000:]}")
        print("data:", subprocess.run(["du", "-sh", os.path.join(tmp, "restored"), replica], capture_output=True,
                                      text=True).stdout.replace("\n", "; "))


def shutdown(args):
    with Setup(args, ["--litestream"] if args.litestream_flag else []) as setup:
        server, url = setup.server, setup.url
        for i in range(2000):
            http("PUT", f"{url}/kv/{(b'key-%d' % i).hex()}", b"value-%d" % i)
        time.sleep(5)  # Litestream has every database open, its read transaction held
        began = time.monotonic()
        server.send_signal(signal.SIGTERM)
        code = server.wait()
        print(f"partitions {args.partitions}, --litestream {args.litestream_flag}: stopped in "
              f"{time.monotonic() - began:.2f} s, exit {code}")
        setup.log.flush()
        lines = [l for l in open(setup.log_path) if "checkpoint" in l]
        print(f"{len(lines)} checkpoint lines in the server's log; first: {lines[0].strip() if lines else '-'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["lag", "shutdown"])
    ap.add_argument("shardlite")
    ap.add_argument("litestream")
    ap.add_argument("--partitions", type=int, default=256)
    ap.add_argument("--rate", type=int, default=5000)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--probe", choices=["ltx", "restore"], default="ltx",
                    help="lag: how a probe sees its marker in the replica")
    ap.add_argument("--db-set", action="append", default=[], help="passed to litestream-config")
    ap.add_argument("--replica-set", action="append", default=[], help="passed to litestream-config")
    ap.add_argument("--tools", help="the shardlite that writes the config (to measure an older server)")
    ap.add_argument("--litestream-flag", action="store_true", help="shutdown: serve with --litestream")
    args = ap.parse_args()
    {"lag": lag, "shutdown": shutdown}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
