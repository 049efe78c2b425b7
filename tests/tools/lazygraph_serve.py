#!/usr/bin/env python3
"""Host tests of lazygraph-serve: its options, and the server on the no-GPU path.

Usage: lazygraph_serve.py TOOL VERSION
Every run points LAZYGRAPH_CUDA_DRIVER at a missing file, so the server always starts without a GPU, whatever
machine this runs on: it answers /health with the reason it cannot serve, /v1/models and /metrics, and refuses bad
requests with 400 naming the field (every check made before generation), then drains on SIGTERM and exits 0.
The checkpoint is written here (zero weights: nothing is computed). A few seconds in all.
"""
import http.client
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

TOOL, VERSION = os.path.abspath(sys.argv[1]), sys.argv[2]
MISSING_DRIVER = "/nonexistent/libcuda.so.1"

from model_files import CONFIG, byte_level_tokenizer, write_checkpoint  # noqa: E402  (beside this file)


def environment():
    return dict(os.environ, LAZYGRAPH_CUDA_DRIVER=MISSING_DRIVER)


def run(*args):
    return subprocess.run([TOOL, *args], env=environment(), capture_output=True, text=True, timeout=60)


class Options(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.model = os.path.join(self.tmp.name, "tiny")
        write_checkpoint(self.model)

    def tearDown(self):
        self.tmp.cleanup()

    def expect(self, code, *args, stderr_has=()):
        r = run(*args)
        self.assertEqual(r.returncode, code, r.stderr)
        for text in stderr_has:
            self.assertIn(text, r.stderr)
        return r

    def test_help_documents_every_option_route_and_exit_status(self):
        r = self.expect(0, "--help")
        for text in ("--host", "--port", "--model-name", "--context", "--max-batch", "--kv-cache", "--kv-blocks",
                     "--kv-block-size", "--max-queue", "--max-prompt-tokens", "--prefix-cache", "--max-body",
                     "--threads", "--drain-timeout", "--device", "/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics", "Exit status", "SIGTERM"):
            self.assertIn(text, r.stdout)
        self.assertIn(VERSION, self.expect(0, "--version").stdout)

    def test_a_bad_command_line_exits_2_naming_what_is_wrong(self):
        self.expect(2, stderr_has=["MODEL_DIR is missing"])
        self.expect(2, self.model, "--bogus", stderr_has=["unknown option '--bogus'"])
        self.expect(2, self.model, "--port", "70000", stderr_has=["--port must be an integer from 0 to 65535, "
                                                                  "not '70000'"])
        self.expect(2, self.model, "--port=1", "--port=2", stderr_has=["--port is given twice"])
        self.expect(2, self.model, "--max-batch", "257", stderr_has=["--max-batch must be an integer from 1 to 256"])
        self.expect(2, self.model, "--max-batch", "9", "--kv-cache", "contiguous",
                    stderr_has=["--max-batch 9 is more than 8, which needs the paged KV cache (it is contiguous "
                                "because --kv-cache contiguous)"])
        self.expect(2, self.model, "--max-queue", "0", stderr_has=["--max-queue must be an integer from 1"])
        self.expect(2, self.model, "--max-prompt-tokens", "-1",
                    stderr_has=["--max-prompt-tokens must be an integer from 0"])
        self.expect(2, self.model, "--prefix-cache", "yes", stderr_has=["--prefix-cache must be on or off, not 'yes'"])
        self.expect(2, self.model, "--host", stderr_has=["--host needs a value"])
        self.expect(2, os.path.join(self.tmp.name, "nowhere"), stderr_has=["does not exist"])
        self.expect(2, os.path.join(self.model, "config.json"), stderr_has=["is not a folder"])
        self.expect(2, self.model, "--context", "65", stderr_has=["--context 65 is more than the model's "
                                                                  "max_position_embeddings (64"])
        self.expect(2, self.model, "--context", "131073", stderr_has=["--context must be an integer from 1 to "
                                                                      "131072"])
        self.expect(2, self.model, "--kv-cache", "pages", stderr_has=["--kv-cache must be auto, paged or "
                                                                      "contiguous, not 'pages'"])
        self.expect(2, self.model, "--kv-block-size", "24", stderr_has=["--kv-block-size must be 16 or 32, not '24'"])
        self.expect(2, self.model, "--kv-blocks", "0", stderr_has=["--kv-blocks must be an integer from 1"])

    def test_a_context_beyond_8192_needs_the_paged_cache(self):
        long = os.path.join(self.tmp.name, "long")
        write_checkpoint(long, dict(CONFIG, max_position_embeddings=20000))
        self.expect(2, long, "--kv-cache", "contiguous", "--context", "8193",
                    stderr_has=["--context 8193 is more than 8192, the most the contiguous KV cache holds (it is "
                                "contiguous because --kv-cache contiguous)"])

    def test_an_address_in_use_exits_1_naming_it(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            self.expect(1, self.model, "--port", str(port), stderr_has=[f"cannot listen on 127.0.0.1:{port}"])

    def test_a_model_folder_that_cannot_be_used_exits_1_naming_the_file(self):
        os.remove(os.path.join(self.model, "config.json"))
        self.expect(1, self.model, stderr_has=["config.json"])


class NoGpuServer(unittest.TestCase):
    """One server for the whole class: started once (a fraction of a second), stopped with SIGTERM at the end."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = os.path.join(cls.tmp.name, "tiny-llama")
        write_checkpoint(cls.model)
        with open(os.path.join(cls.model, "tokenizer.json"), "w") as f:
            f.write(byte_level_tokenizer(300))
        cls.server = subprocess.Popen([TOOL, cls.model, "--port", "0", "--max-body", "4000"], env=environment(),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = cls.server.stdout.readline()
        if not line.startswith("listening on "):
            cls.server.kill()
            raise RuntimeError("the server did not start: " + line + cls.server.stderr.read())
        cls.port = int(line.rsplit(":", 1)[1])
        cls.startup = "-"
        while cls.startup and "serving" not in cls.startup:  # the startup line: on stderr before "listening on"
            cls.startup = cls.server.stderr.readline()

    @classmethod
    def tearDownClass(cls):
        if cls.server.poll() is None:
            cls.server.kill()
            cls.server.wait()
        cls.tmp.cleanup()

    def request(self, method, path, body=None):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def refused(self, path, body, status=400):
        """The error message of a request refused with `status`."""
        got, text = self.request("POST", path, body if isinstance(body, bytes) else json.dumps(body).encode())
        self.assertEqual(got, status, text)
        error = json.loads(text)["error"]
        return error["message"], error["param"]

    def test_health_says_why_it_cannot_serve(self):
        status, text = self.request("GET", "/health")
        self.assertEqual(status, 503)
        health = json.loads(text)
        self.assertEqual(health["status"], "unavailable")
        self.assertIn("no GPU to run on", health["reason"])
        self.assertIn("libcuda", health["reason"])

    def test_a_llama_is_served_on_the_paged_cache_of_max_batch_whole_contexts(self):
        health = json.loads(self.request("GET", "/health")[1])
        self.assertEqual(health["kv_cache"], "paged")
        self.assertNotIn("kv_cache_reason", health)
        self.assertEqual((health["kv_blocks"], health["kv_block_size"]), (8 * 4, 16))  # 8 sequences of 64 positions
        metrics = self.request("GET", "/metrics")[1].decode()
        self.assertIn("lazygraph_kv_blocks_total 32\n", metrics)
        self.assertIn('lazygraph_kv_cache_info{kv_cache="paged",block_size="16"} 1', metrics)
        self.assertIn("paged KV cache of 32 blocks of 16 positions", self.startup)

    def test_thousands_of_idle_connections_do_not_hold_up_other_clients(self):
        # Each connection holds a worker thread (512) until its first request or the 1 s idle limit, so /health waits
        # about count / 512 seconds (1 s for 1000). With 64 workers, a 2 s limit and httplib's listen backlog of 5 it
        # waited 27 s behind 2000 idle connections (86 s behind 5000), and connecting took seconds.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 1100
        if soft < want and (hard == resource.RLIM_INFINITY or hard >= want):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        count = min(1000, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 100)
        idle = []
        try:
            for _ in range(count):
                idle.append(socket.create_connection(("127.0.0.1", self.port), timeout=10))
            start = time.monotonic()
            status, _ = self.request("GET", "/health")
            waited = time.monotonic() - start
        finally:
            for s in idle:
                s.close()
        self.assertEqual(status, 503)
        self.assertLess(waited, 5.0, f"/health took {waited:.1f} s behind {count} idle connections")

    def test_models_lists_the_folder_name(self):
        status, text = self.request("GET", "/v1/models")
        self.assertEqual(status, 200)
        models = json.loads(text)
        self.assertEqual([m["id"] for m in models["data"]], ["tiny-llama"])
        self.assertEqual(models["data"][0]["max_model_len"], 64)

    def test_metrics_are_prometheus_text(self):
        status, text = self.request("GET", "/metrics")
        self.assertEqual(status, 200)
        text = text.decode()
        for name in ("lazygraph_up 0", "lazygraph_queue_depth 0", "lazygraph_kv_blocks_used 0",
                     "lazygraph_kv_blocks_cached 0", "lazygraph_cached_prompt_tokens_total 0",
                     "lazygraph_tokens_per_second 0", "lazygraph_time_to_first_token_seconds_count 0",
                     "lazygraph_requests_cancelled_total 0", "lazygraph_step_seconds_count 0",
                     "lazygraph_step_seconds_sum 0", "lazygraph_model_step_seconds_total 0",
                     "# TYPE lazygraph_step_seconds summary",
                     "# TYPE lazygraph_generated_tokens_total counter"):
            self.assertIn(name, text)

    def test_bad_requests_are_refused_with_400_naming_the_field(self):
        completions = "/v1/completions"
        good = {"model": "tiny-llama", "prompt": "hello"}
        cases = [
            (b'{"model": "tiny-llama", "prompt": ', "body", "malformed JSON"),
            (b'{"model": "tiny-llama", "prompt": "ab\xff"}', "prompt", "not valid UTF-8"),
            (dict(good, max_tokens=0), "max_tokens", "must be at least 1, not 0"),
            (dict(good, max_tokens=-5), "max_tokens", "must be at least 1, not -5"),
            (dict(good, max_tokens=65), "max_tokens", "65 is more than the context of 64"),
            (dict(good, model="gpt-4"), "model", "unknown model 'gpt-4'; this server serves 'tiny-llama'"),
            (dict(good, n=2), "n", "only 1 completion per request"),
            (dict(good, temperature=-1), "temperature", "must be 0 (greedy) or more"),
            (dict(good, stop=[""]), "stop[0]", "must not be empty"),
            (dict(good, prompt="x" * 100), "prompt", "101 tokens, more than the context of 64"),
            (dict(good, prompt=[1, 2, 3], stream="yes"), "stream", "must be true or false"),
        ]
        for body, field, message in cases:
            with self.subTest(field=field, message=message):
                got, param = self.refused(completions, body)
                self.assertEqual(param, field)
                self.assertTrue(got.startswith(field + ": "), got)
                self.assertIn(message, got)
        # No chat template in the folder: a chat is refused naming the messages, and why.
        got, param = self.refused("/v1/chat/completions",
                                  {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual(param, "messages")
        self.assertIn("no chat template", got)
        got, param = self.refused("/v1/chat/completions", {"model": "tiny-llama", "messages": []})
        self.assertEqual(param, "messages")

    def test_a_body_over_the_limit_is_refused_naming_the_body(self):
        got, param = self.refused("/v1/completions", b"{" + b" " * 5000 + b"}", status=413)
        self.assertEqual(param, "body")
        self.assertIn("more than the limit of 4000 bytes", got)

    def test_a_valid_request_without_a_gpu_is_answered_503_with_the_reason(self):
        got, _ = self.refused("/v1/completions", {"model": "tiny-llama", "prompt": "hello", "stream": True},
                              status=503)
        self.assertIn("no GPU to run on", got)

    def test_zz_sigterm_stops_the_server_cleanly(self):  # last: the other tests need the server
        self.server.send_signal(signal.SIGTERM)
        self.assertEqual(self.server.wait(timeout=20), 0)
        self.assertIn("draining", self.server.stderr.read())


class KvCacheChoice(unittest.TestCase):
    """What /health, /v1/models and /metrics say of the KV cache each model and option gives (no GPU needed)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def served(self, config, *args):
        """/health, /v1/models' model and /metrics of a server of `config`'s zero checkpoint started with `args`."""
        model = os.path.join(self.tmp.name, "m")
        write_checkpoint(model, config)
        with subprocess.Popen([TOOL, model, "--port", "0", *args], env=environment(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) as server:
            return self.answers(server)

    def answers(self, server):
        try:
            line = server.stdout.readline()
            if not line.startswith("listening on "):
                server.kill()
                self.fail("the server did not start: " + line + server.stderr.read())
            port = int(line.rsplit(":", 1)[1])
            answers = []
            for path in ("/health", "/v1/models", "/metrics"):
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                connection.request("GET", path)
                answers.append(connection.getresponse().read())
                connection.close()
            server.send_signal(signal.SIGTERM)
            self.assertEqual(server.wait(timeout=20), 0)
            return json.loads(answers[0]), json.loads(answers[1])["data"][0], answers[2].decode()
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()

    def test_a_paged_context_reaches_beyond_8192_with_a_pool_of_the_blocks_asked_for(self):
        health, model, metrics = self.served(dict(CONFIG, max_position_embeddings=20000), "--context", "16384",
                                             "--kv-block-size", "32", "--kv-blocks", "700", "--max-batch", "2")
        self.assertEqual((health["kv_cache"], health["kv_blocks"], health["kv_block_size"]), ("paged", 700, 32))
        self.assertEqual(model["max_model_len"], 16384)
        self.assertIn("lazygraph_kv_blocks_total 700\n", metrics)

    def test_a_model_with_q_k_norms_is_served_paged_and_contiguous_when_asked_saying_why(self):
        qwen3 = dict(CONFIG, model_type="qwen3", architectures=["Qwen3ForCausalLM"])
        health, model, metrics = self.served(qwen3, "--max-batch", "2")
        self.assertEqual(health["kv_cache"], "paged")
        self.assertIn('lazygraph_kv_cache_info{kv_cache="paged",block_size="16"} 1', metrics)
        health, _, _ = self.served(dict(CONFIG), "--kv-cache", "contiguous")
        self.assertEqual((health["kv_cache"], health["kv_cache_reason"]), ("contiguous", "--kv-cache contiguous"))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
