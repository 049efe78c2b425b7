#!/usr/bin/env python3
"""lazygraph-serve end to end on a GPU: many concurrent streaming requests give what each gives alone.

Usage: lazygraph_serve_gpu.py TOOL
Writes a small Llama checkpoint of seeded random weights and a byte-level tokenizer.json. Then, on the paged KV
cache (the default for this model) and again with --kv-cache contiguous, each with --context 64: starts the server on
a free port, checks that /health names that cache, sends 40 requests one at a time (whole answers: their token ids
and text), then the same 40 as 200 concurrent streaming requests (each prompt five times), 20 of them (10 %)
disconnecting after their first chunk, and checks that every stream that was read to the end has the text of its
prompt alone, and that once all are done the KV pool is empty and nothing runs or waits (/metrics). Prompts and
limits keep every sequence below 16 tokens. A row's logits alone and in a batch differ within rounding (steps of
2 to 8 rows on tensor cores, the wide step's GEMMs, the paged cache's packed prompts), so the texts are equal where
no greedy choice falls within that rounding of a tie: with these seeded weights and prompts none does, which is what
this test relies on (a failure naming one request is first to be checked for a near tie). Last, on the paged cache with a context of 32768 and one slot: three
whole (non-streamed) requests of 32000 tokens whose clients close their connections after 50 ms are cancelled (the
LM head's row of the end-of-sequence id is zero, so greedy decoding never stops early), and the pool empties.
Exits 77 (skipped) when the server reports no GPU. About a minute.
"""
import http.client
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from model_files import CONFIG, byte_level_tokenizer, tensor_shapes  # noqa: E402  (beside this file)

TOOL = os.path.abspath(sys.argv[1])


def write_random_checkpoint(directory, seed=7):
    os.makedirs(directory, exist_ok=True)
    config = dict(CONFIG, max_position_embeddings=32768)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    rng = random.Random(seed)
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, shape in tensor_shapes(config).items():
        n = 1
        for s in shape:
            n *= s
        values = [1.0] * n if name.endswith("norm.weight") else [rng.gauss(0.0, 0.08) for _ in range(n)]
        if name == "lm_head.weight":  # the end-of-sequence id's logit is 0, below the largest of 299 random ones
            eos, d = config["eos_token_id"], shape[1]
            values[eos * d:(eos + 1) * d] = [0.0] * d
        blob = struct.pack(f"<{n}e", *values)
        header[name] = {"dtype": "F16", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(directory, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    with open(os.path.join(directory, "tokenizer.json"), "w") as f:
        f.write(byte_level_tokenizer(config["vocab_size"]))


def main():
    tmp = tempfile.TemporaryDirectory()
    model = os.path.join(tmp.name, "random-llama")
    write_random_checkpoint(model)
    try:
        for run in (lambda: concurrent_streams(model, "paged"), lambda: concurrent_streams(model, "contiguous"),
                    lambda: whole_answers_abandoned(model)):
            code = run()
            if code != 0:
                return code
        return 0
    finally:
        tmp.cleanup()


def metrics_of(request):
    _, text = request("GET", "/metrics")
    return dict(line.split(" ", 1) for line in text.decode().splitlines() if not line.startswith("#"))


def serving(model, args, check):
    """Runs `check(port, request)` against a server of `model` started with `args`, once it is healthy; its exit
    code (77 when the server has no GPU), or 1 when the server does not start or stop cleanly."""
    server = subprocess.Popen([TOOL, model, "--port", "0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    line = server.stdout.readline()
    if not line.startswith("listening on "):
        print("the server did not start:", line, server.stderr.read())
        return 1
    port = int(line.rsplit(":", 1)[1])

    def request(method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    try:
        code = check_when_healthy(request, lambda health: check(port, request, health))
    finally:
        stopped = stop(server)
    return code if stopped else 1


def check_when_healthy(request, check):
    """check(/health's answer) once the server is healthy; 77 when it has no GPU, 1 when it never becomes healthy."""
    deadline = time.time() + 300  # loading compiles (or reads from the cache) the kernels
    while True:
        status, text = request("GET", "/health")
        health = json.loads(text)
        if status == 200:
            return check(health)
        if "no GPU" in health.get("reason", ""):
            print("skipped:", health["reason"])
            return 77
        if time.time() > deadline:
            print("the server never became healthy:", health)
            return 1
        time.sleep(0.5)


def stop(server):
    """Sends SIGTERM; whether the server then exits 0 within 60 s."""
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        print("the server did not stop within 60 s of SIGTERM")
        return False
    if code != 0:
        print("the server exited with", code, server.stderr.read()[-2000:])
    return code == 0


def concurrent_streams(model, kv_cache):
    """The 40 prompts alone, then as 200 concurrent streams, on the `kv_cache` cache ("paged" or "contiguous")."""
    args = ["--context", "64", "--max-queue", "256", "--threads", "256"]
    if kv_cache == "contiguous":
        args += ["--kv-cache", "contiguous"]
    return serving(model, args, lambda port, request, health: check_streams(port, request, health, kv_cache))


def check_streams(port, request, health, kv_cache):
    if health.get("kv_cache") != kv_cache:
        print(f"FAIL: /health says the KV cache is {health.get('kv_cache')!r}, not {kv_cache!r}: {health}")
        return 1
    rng = random.Random(11)
    prompts = [[rng.randrange(3, 256) for _ in range(rng.randrange(1, 6))] for _ in range(40)]
    limits = [rng.randrange(1, 10) for _ in prompts]
    alone = []
    for prompt, limit in zip(prompts, limits):
        status, text = request("POST", "/v1/completions",
                               {"model": "random-llama", "prompt": prompt, "max_tokens": limit})
        assert status == 200, text
        choice = json.loads(text)["choices"][0]
        assert 1 <= len(choice["token_ids"]) <= limit or choice["finish_reason"] == "stop", choice
        alone.append(choice["text"])

    failures = []
    results = {}

    def stream(i, disconnect):
        k = i % len(prompts)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            c.request("POST", "/v1/completions",
                      body=json.dumps({"model": "random-llama", "prompt": prompts[k], "max_tokens": limits[k],
                                       "stream": True}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                failures.append(f"request {i}: status {r.status}: {r.read()[:200]}")
                return
            text, done = "", False
            for raw in r:
                raw = raw.decode().strip()
                if not raw.startswith("data: "):
                    continue
                if disconnect:
                    return  # closes the connection after the first chunk
                data = raw[len("data: "):]
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    failures.append(f"request {i}: {chunk}")
                    return
                text += chunk["choices"][0]["text"]
            if not done:
                failures.append(f"request {i}: the stream ended without [DONE]")
            results[i] = text
        except Exception as e:  # noqa: BLE001 - reported as a failure of this request
            failures.append(f"request {i}: {e!r}")
        finally:
            c.close()

    threads = [threading.Thread(target=stream, args=(i, i % 10 == 9)) for i in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, text in results.items():
        if text != alone[i % len(prompts)]:
            failures.append(f"request {i}: streamed {text!r}, alone {alone[i % len(prompts)]!r}")
    if len(results) != 180:
        failures.append(f"{len(results)} streams read to the end, not 180")

    metrics = {}
    deadline = time.time() + 30
    while time.time() < deadline:
        metrics = metrics_of(request)
        if (float(metrics["lazygraph_kv_blocks_used"]) == 0 and float(metrics["lazygraph_running_requests"]) == 0
                and float(metrics["lazygraph_queue_depth"]) == 0):
            break
        time.sleep(0.2)
    else:
        failures.append(f"the pool did not return to empty: {metrics}")
    for failure in failures[:20]:
        print("FAIL:", failure)
    print(f"{kv_cache}: {len(results)} streams compared; finished "
          f"{metrics.get('lazygraph_requests_finished_total')}, "
          f"cancelled {metrics.get('lazygraph_requests_cancelled_total')}, "
          f"tokens/s {metrics.get('lazygraph_tokens_per_second')}")
    return 1 if failures else 0


def whole_answers_abandoned(model):
    """Three long non-streamed requests (one running, two queued) whose clients leave after 50 ms are cancelled."""
    return serving(model, ["--context", "32768", "--max-batch", "1"], check_abandoned)


def check_abandoned(port, request, health):
    if health.get("kv_cache") != "paged":
        print(f"FAIL: /health says the KV cache is {health.get('kv_cache')!r}, not 'paged': {health}")
        return 1
    body = json.dumps({"model": "random-llama", "prompt": [5, 6, 7], "max_tokens": 32000}).encode()
    clients = []
    for _ in range(3):
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        clients.append(c)
    time.sleep(0.05)
    for c in clients:
        c.close()
    failures = []
    metrics = {}
    deadline = time.time() + 20
    while time.time() < deadline:
        metrics = metrics_of(request)
        if (float(metrics["lazygraph_requests_submitted_total"]) == 3 and
                float(metrics["lazygraph_running_requests"]) == 0 and float(metrics["lazygraph_queue_depth"]) == 0):
            break
        time.sleep(0.1)
    else:
        failures.append(f"the requests were not cancelled within 20 s: {metrics}")
    if float(metrics["lazygraph_requests_cancelled_total"]) != 3:
        failures.append(f"{metrics['lazygraph_requests_cancelled_total']} requests cancelled, not 3: {metrics}")
    if float(metrics["lazygraph_kv_blocks_used"]) != 0:
        failures.append(f"the pool did not return to empty: {metrics}")
    for failure in failures:
        print("FAIL:", failure)
    print(f"abandoned whole answers: cancelled {metrics.get('lazygraph_requests_cancelled_total')}, "
          f"tokens made {metrics.get('lazygraph_generated_tokens_total')}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
