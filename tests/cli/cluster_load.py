#!/usr/bin/env python3
"""Load for the cluster test's failover step: STREAMS streamed and WHOLE non-streamed completions of one
prompt (greedy, ignore_eos, MAX_TOKENS each) against the head at PORT, started alternately two of each
kind at a time. Once READY_STREAMS streams have MIN_TOKENS chunks of text it writes the file READY (the test
kills a worker then) and waits for every request, each bounded by TIMEOUT seconds.

Checks what a client must see when a worker dies under it, and exits 1 naming the request otherwise:
no request hangs or loses its connection without an answer; a stream ends either with its finish
reason and [DONE] or with an error event after the tokens it had sent; every non-streamed request
completes whole (its run on the lost worker repeated elsewhere), with the same text as every other
complete answer (greedy: a repeated or garbled token would show). Prints a JSON summary.

usage: cluster_load.py PORT STREAMS WHOLE MAX_TOKENS READY READY_STREAMS MIN_TOKENS TIMEOUT
"""
import http.client
import json
import os
import sys
import threading
import time

port, streams, whole, max_tokens = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ready_file, ready_streams, min_tokens, timeout = sys.argv[5], int(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8])
PROMPT = "Once upon a time"

lock = threading.Lock()
progress = {}  # stream index -> tokens so far
results = {}   # name -> dict


def body(stream):
    b = {"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": stream}
    if stream:
        b["stream_options"] = {"include_usage": True}  # the last event before [DONE] counts the tokens
    return json.dumps(b)


def run_stream(i):
    name = f"stream {i}"
    out = {"kind": "stream", "chunks": 0, "text": "", "end": None}
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/completions", body(True), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            out["end"] = f"status {r.status}: {r.read()[:300]!r}"
        else:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    if out["end"] is None:
                        out["end"] = "[DONE] without a finish reason"
                    elif out["end"] == "finish":
                        out["end"] = "done"
                    break
                event = json.loads(data)
                if "error" in event:
                    out["end"] = "error"
                    out["error"] = event["error"].get("message", "")
                    break
                if event.get("usage"):
                    out["tokens"] = event["usage"]["completion_tokens"]
                if not event.get("choices"):
                    continue
                choice = event["choices"][0]
                if choice.get("text"):
                    out["chunks"] += 1
                    out["text"] += choice["text"]
                    with lock:
                        progress[i] = out["chunks"]
                if choice.get("finish_reason"):
                    out["finish_reason"] = choice["finish_reason"]
                    out["end"] = "finish"
            if out["end"] in (None, "finish"):
                out["end"] = f"the stream closed after {out['chunks']} chunk(s) without [DONE] or an error event"
    except Exception as e:  # a timeout is a hang
        out["end"] = f"{type(e).__name__}: {e}"
    with lock:
        results[name] = out


def run_whole(i):
    name = f"whole {i}"
    out = {"kind": "whole", "end": None}
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("POST", "/v1/completions", body(False), {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            out["end"] = f"status {r.status}: {data[:300]!r}"
        else:
            j = json.loads(data)
            out["text"] = j["choices"][0]["text"]
            out["finish_reason"] = j["choices"][0]["finish_reason"]
            out["tokens"] = j["usage"]["completion_tokens"]
            out["end"] = "done"
    except Exception as e:
        out["end"] = f"{type(e).__name__}: {e}"
    with lock:
        results[name] = out


threads = []
si = wi = 0
while si < streams or wi < whole:
    for _ in range(2):
        if si < streams:
            threads.append(threading.Thread(target=run_stream, args=(si,)))
            si += 1
            threads[-1].start()
            time.sleep(0.01)
    for _ in range(2):
        if wi < whole:
            threads.append(threading.Thread(target=run_whole, args=(wi,)))
            wi += 1
            threads[-1].start()
            time.sleep(0.01)

deadline = time.time() + timeout
while time.time() < deadline:
    with lock:
        if sum(1 for n in progress.values() if n >= min_tokens) >= ready_streams:
            break
    time.sleep(0.005)
with open(ready_file + ".tmp", "w") as f:
    f.write("ready\n")
os.rename(ready_file + ".tmp", ready_file)

for t in threads:
    t.join(timeout + 5)

failures = []
if any(t.is_alive() for t in threads):
    failures.append("a request thread is still running after its timeout")
texts = set()
summary = {"streams_completed": 0, "streams_errored": 0, "whole_completed": 0}
for name, r in sorted(results.items()):
    if r["end"] == "done":
        if r.get("finish_reason") != "length" or r.get("tokens") != max_tokens:
            failures.append(f"{name}: finished '{r.get('finish_reason')}' after {r.get('tokens')} token(s), expected 'length' after {max_tokens}")
        texts.add(r["text"])
        summary["streams_completed" if r["kind"] == "stream" else "whole_completed"] += 1
    elif r["end"] == "error" and r["kind"] == "stream":
        if r["chunks"] == 0:
            failures.append(f"{name}: an error event before any token ({r.get('error')}): it should have been routed again")
        summary["streams_errored"] += 1
        summary.setdefault("stream_error", r.get("error"))
    else:
        failures.append(f"{name}: {r['end']}")
if len(results) != streams + whole:
    failures.append(f"{streams + whole - len(results)} request(s) never ended")
if len(texts) > 1:
    failures.append(f"complete answers differ: {len(texts)} distinct texts for one greedy prompt")
print(json.dumps(summary))
for f in failures:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
