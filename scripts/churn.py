#!/usr/bin/env python3
"""A delete-heavy workload: half deletes of random live records, half inserts of new ones, in
batches through POST /batch, for SECONDS; prints the data directory's sizes as it goes
(docs/operations.md, "Compaction").

usage: scripts/churn.py URL DATA_DIR RECORDS SECONDS [THREADS] > log   (needs: pip install xxhash)

RECORDS: how many records `shardlite load --records RECORDS` (seed 1, 32-byte keys) put in
DATA_DIR; inserted keys go on from there (key RECORDS, RECORDS+1, ...), with 32-byte values.
Ends with one line: `live N deleted D inserted I`.
"""
import http.client, json, os, random, sys, threading, time, urllib.parse
from keys import key

BATCH = 200  # operations per request: BATCH/2 deletes, BATCH/2 inserts


def sizes(data):
    """Bytes of the databases, their WALs and the index files."""
    out = {"db": 0, "wal": 0, "idx": 0}
    for name in os.listdir(data):
        kind = "wal" if name.endswith(".db-wal") else "db" if name.endswith(".db") else "idx" if name.endswith(".idx") else None
        if kind:
            out[kind] += os.path.getsize(os.path.join(data, name))
    return out


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    url, data, records, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    threads = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    live, lock, rng = list(range(records)), threading.Lock(), random.Random(7)
    counts = {"next": records, "deleted": 0, "inserted": 0}
    deadline = time.monotonic() + seconds
    target = urllib.parse.urlsplit(url)

    def batch():
        with lock:
            ops = []
            for _ in range(BATCH // 2):
                at = rng.randrange(len(live))
                live[at], victim = live[-1], live[at]
                live.pop()
                ops.append({"op": "delete", "key": key(1, victim).hex()})
                ops.append({"op": "put", "key": key(1, counts["next"]).hex(), "value": os.urandom(32).hex()})
                live.append(counts["next"])
                counts["next"] += 1
            return json.dumps({"ops": ops})

    def worker():
        conn = http.client.HTTPConnection(target.hostname, target.port)
        while time.monotonic() < deadline:
            conn.request("POST", "/batch", body=batch(), headers={"content-type": "application/json"})
            answer = conn.getresponse()
            body = json.loads(answer.read())
            if answer.status != 200:
                sys.exit(f"POST /batch: {answer.status} {body}")
            with lock:
                counts["deleted"] += sum(r["status"] == 204 for r in body["results"])
                counts["inserted"] += sum(r["status"] == 201 for r in body["results"])

    started = time.monotonic()
    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    while any(w.is_alive() for w in workers):
        time.sleep(10)
        s = sizes(data)
        print(f"{time.monotonic() - started:6.0f} s  ops {counts['deleted'] + counts['inserted']:>9}  "
              f"db {s['db'] / 2**20:8.1f} MiB  wal {s['wal'] / 2**20:7.1f} MiB  idx {s['idx'] / 2**20:7.1f} MiB", flush=True)
    print(f"live {len(live)} deleted {counts['deleted']} inserted {counts['inserted']}")


if __name__ == "__main__":
    main()
