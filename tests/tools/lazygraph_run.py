#!/usr/bin/env python3
"""Host tests of lazygraph-run: its options, and everything it checks before it needs a GPU.

Usage: lazygraph_run.py TOOL VERSION [SPM_TRAIN]
Every run points LAZYGRAPH_CUDA_DRIVER at a missing file, so these tests see the no-GPU path whatever machine
they run on: a run that passes every host-side check ends with exit 77 and the reason. The checkpoints are
written here (zero weights: nothing is computed). SPM_TRAIN (sentencepiece's spm_train), when given and the tool
was built with SentencePiece, trains the tokenizer.model the text-prompt tests use.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

TOOL, VERSION = os.path.abspath(sys.argv[1]), sys.argv[2]
SPM_TRAIN = sys.argv[3] if len(sys.argv) > 3 else ""
MISSING_DRIVER = "/nonexistent/libcuda.so.1"

from model_files import CONFIG, byte_level_tokenizer, write_checkpoint  # noqa: E402  (beside this file)


def run(*args, env_changes=None):
    env = dict(os.environ, LAZYGRAPH_CUDA_DRIVER=MISSING_DRIVER)
    env.update(env_changes or {})
    return subprocess.run([TOOL, *args], env=env, capture_output=True, text=True, timeout=60)


def built_with_sentencepiece():
    out = run("--version").stdout
    return out.rstrip().endswith("SentencePiece tokenizer: yes")


class LazygraphRun(unittest.TestCase):
    def setUp(self):
        self.scratch = tempfile.TemporaryDirectory(prefix="lazygraph-run-test-")
        self.model = os.path.join(self.scratch.name, "model")
        write_checkpoint(self.model)

    def tearDown(self):
        self.scratch.cleanup()

    def path(self, *parts):
        return os.path.join(self.scratch.name, *parts)

    def expect(self, code, *args, stderr_has=(), **kwargs):
        r = run(*args, **kwargs)
        self.assertEqual(r.returncode, code, f"args {args}\nstdout: {r.stdout}\nstderr: {r.stderr}")
        for part in stderr_has:
            self.assertIn(part, r.stderr)
        return r

    def expect_no_gpu(self, *args):
        """A run that passed every host-side check: it stops at the GPU, saying why, having printed nothing."""
        r = self.expect(77, *args, stderr_has=("no GPU to run on", MISSING_DRIVER))
        self.assertEqual(r.stdout, "")
        return r

    # ---- options -------------------------------------------------------------------------------------------

    def test_help_documents_every_option_and_exit_status(self):
        r = self.expect(0, "--help")
        self.assertTrue(r.stdout.startswith("Usage: lazygraph-run MODEL_DIR [PROMPT] [options]"), r.stdout)
        for word in ("--ids", "--max-tokens", "--temperature", "--top-k", "--top-p", "--seed", "--context",
                     "--dtype", "--device", "--no-bos", "--ignore-eos", "--stop", "--json", "--help", "--version",
                     "--chat", "--system", "--messages", "--chat-vars", "chat_template",
                     "tokenizer.json", "tokenizer.model",
                     "generation_config.json", "eos_token_id", "bos_token_id", "LAZYGRAPH_CUDA_DRIVER"):
            self.assertIn(word, r.stdout)
        status = r.stdout[r.stdout.index("Exit status:"):]
        for code in ("0   after generating", "1   MODEL_DIR's", "2   a bad command line", "77  no GPU to run on"):
            self.assertIn(code, status)
        self.assertIn("supported" if built_with_sentencepiece() else "NOT supported", r.stdout)
        self.assertEqual(run("-h").stdout, r.stdout)
        self.assertEqual(run(self.model, "--ids", "1", "--help").stdout, r.stdout)

    def test_version_says_the_version_and_whether_text_prompts_work(self):
        r = self.expect(0, "--version")
        self.assertRegex(r.stdout, r"^lazygraph-run \(lazygraph " + re.escape(VERSION) +
                         r"\), SentencePiece tokenizer: (yes|no)\n$")

    def test_a_bad_command_line_exits_2_naming_what_is_wrong_before_reading_anything(self):
        missing = self.path("nowhere")  # never read: the command line fails first
        cases = [
            ((), "no MODEL_DIR"),
            ((missing,), "no prompt"),
            ((missing, "--bogus"), "unknown option '--bogus'"),
            ((missing, "text", "--ids", "1"), "not both"),
            ((missing, "a", "b"), "too many arguments: 'b'"),
            ((missing, "--ids", "1,,2"), "--ids must be token ids (integers from 0) separated by commas"),
            ((missing, "--ids", "1,x"), "not '1,x' ('x' is not one)"),
            ((missing, "--ids", "-3"), "not '-3'"),
            ((missing, "--ids", "1", "--ids", "2"), "--ids is given twice: give it once"),
            ((missing, "--ids", "1", "--seed=1", "--seed", "2"), "--seed is given twice"),
            ((missing, "--ids", "1", "--max-tokens", "0"), "--max-tokens must be an integer from 1 to 2147483647, not '0'"),
            ((missing, "--ids", "1", "--max-tokens=many"), "--max-tokens must be an integer from 1 to 2147483647, not 'many'"),
            ((missing, "--ids", "1", "--top-k", "-3"), "--top-k must be an integer from 0 to 2147483647, not '-3'"),
            ((missing, "--ids", "1", "--temperature", "-1"), "--temperature must be 0 (greedy) or a number from 1.18e-38 to 3.4e38, not '-1'"),
            ((missing, "--ids", "1", "--temperature", "nan"), "--temperature must be 0 (greedy) or a number"),
            ((missing, "--ids", "1", "--temperature", "1e-50"), "not '1e-50'"),  # 1 / T is infinite in float
            ((missing, "--ids", "1", "--temperature", "1e39"), "not '1e39'"),  # beyond float
            ((missing, "--ids", "1", "--top-p", "1.5"), "--top-p must be in (0, 1], not '1.5'"),
            ((missing, "--ids", "1", "--top-p", "1.0000001"), "--top-p must be in (0, 1], not '1.0000001'"),
            ((missing, "--ids", "1", "--top-p", "0"), "--top-p must be in (0, 1], not '0'"),
            ((missing, "--ids", "1", "--top-p", "-1e-400"), "--top-p must be in (0, 1], not '-1e-400'"),
            ((missing, "--ids", "1", "--seed", "-1"), "--seed must be an integer from 0 to 4294967295, not '-1'"),
            ((missing, "--ids", "1", "--seed", "4294967296"), "not '4294967296'"),
            ((missing, "--ids", "1", "--context", "0"), "--context must be an integer from 1 to 8192"),
            ((missing, "--ids", "1", "--context", "8193"), "--context must be an integer from 1 to 8192 (the most positions a KV cache holds), not '8193'"),
            ((missing, "--ids", "1", "--dtype", "fp32"), "--dtype must be fp16 or bf16, not 'fp32'"),
            ((missing, "--ids", "1", "--device", "-1"), "--device must be an integer from 0 to 2147483647, not '-1'"),
            ((missing, "--ids", "1", "--device=gpu1"), "not 'gpu1'"),
            ((missing, "--ids", "1", "--seed"), "--seed needs a value"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                r = self.expect(2, *args, stderr_has=(message, "--help"))
                self.assertEqual(r.stdout, "")

    # ---- the checkpoint ------------------------------------------------------------------------------------

    def test_a_model_dir_that_does_not_exist_or_is_a_file_exits_2_naming_it(self):
        missing = self.path("nowhere")
        r = self.expect(2, missing, "--ids", "1", stderr_has=(f"MODEL_DIR '{missing}' does not exist",))
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)  # one sentence
        file = os.path.join(self.model, "config.json")
        self.expect(2, file, "--ids", "1", stderr_has=(f"MODEL_DIR '{file}' is not a folder",))

    def test_a_model_folder_that_cannot_be_loaded_exits_1_with_the_loaders_message(self):
        empty = self.path("empty")
        os.mkdir(empty)
        self.expect(1, empty, "--ids", "1", stderr_has=(os.path.join(empty, "config.json"), "cannot open"))
        with open(os.path.join(self.model, "config.json"), "w") as f:
            f.write("{not json")
        self.expect(1, self.model, "--ids", "1", stderr_has=("config.json", "not valid JSON"))
        gappy = self.path("gappy")
        write_checkpoint(gappy, leave_out=("model.layers.1.mlp.up_proj.weight",))
        self.expect(1, gappy, "--ids", "1", stderr_has=("model.layers.1.mlp.up_proj.weight",))

    def test_a_valid_checkpoint_and_prompt_reach_the_gpu_check_and_exit_77(self):
        self.expect_no_gpu(self.model, "--ids", "1,5,9")
        self.expect_no_gpu(self.model, "--ids=1,5,9", "--dtype", "bf16", "--temperature", "0.8", "--top-k", "40",
                           "--top-p", "0.9", "--seed", "7", "--max-tokens", "5", "--context", "32")
        bf16 = self.path("bf16")
        write_checkpoint(bf16, dict(CONFIG, torch_dtype="bfloat16"), dtype="BF16")
        self.expect_no_gpu(bf16, "--ids", "299", "--ignore-eos")
        # Limits' own edges are accepted: a temperature whose reciprocal float holds, a top-p at 1 or too small for
        # float (it keeps the most probable tokens, as float's smallest does), the most positions a model allows.
        self.expect_no_gpu(self.model, "--ids", "1", "--temperature", "1.18e-38", "--top-p", "1")
        self.expect_no_gpu(self.model, "--ids", "1", "--temperature", "3.4e38", "--top-p", "1e-400")
        self.expect_no_gpu(self.model, "--ids", "1", "--context", "64", "--temperature", "-0")

    def test_a_device_is_checked_against_the_gpus_only_once_there_is_a_driver(self):
        self.expect_no_gpu(self.model, "--ids", "1", "--device", "5")

    def test_a_prompt_outside_the_vocabulary_or_the_context_exits_2_naming_it(self):
        self.expect(2, self.model, "--ids", "1,300", stderr_has=("prompt token 1 (300)", "[0, 300)"))
        self.expect(2, self.model, "--ids", "1,2,3,4,5", "--context", "4",
                    stderr_has=("a prompt of 5 tokens", "context of 4"))
        self.expect(2, self.model, "--ids", "1", "--context", "65",
                    stderr_has=("--context 65 is more than the model's max_position_embeddings (64 in",))
        self.expect(2, self.path("big"), "--ids", "1", "--context", "9000",  # never read: the flag fails first
                    stderr_has=("--context must be an integer from 1 to 8192",))

    def test_a_sliding_window_does_not_bound_the_context(self):
        mistral = self.path("mistral")
        write_checkpoint(mistral, dict(CONFIG, model_type="mistral", architectures=["MistralForCausalLM"],
                                       sliding_window=32))
        self.expect_no_gpu(mistral, "--ids", "1", "--context", "33")  # the window is the attention's, not the cache's
        self.expect_no_gpu(mistral, "--ids", ",".join(["1"] * 40))  # the default context: 64

    # ---- generation_config.json ------------------------------------------------------------------------------

    def write_generation_config(self, text):
        with open(os.path.join(self.model, "generation_config.json"), "w") as f:
            f.write(text)

    def test_end_of_sequence_ids_may_be_one_a_list_or_null(self):
        for value in ("2", "[2, 7]", "null"):
            with self.subTest(eos=value):
                self.write_generation_config('{"bos_token_id": 1, "eos_token_id": %s}' % value)
                self.expect_no_gpu(self.model, "--ids", "1")

    def test_a_generation_config_that_cannot_be_used_exits_1_naming_the_file_and_key(self):
        self.write_generation_config("[1, 2")
        self.expect(1, self.model, "--ids", "1", stderr_has=("generation_config.json", "not valid JSON"))
        self.write_generation_config('{"eos_token_id": "two"}')
        self.expect(1, self.model, "--ids", "1", stderr_has=("generation_config.json", "eos_token_id", '"two"'))
        self.write_generation_config('{"eos_token_id": [2, -1]}')
        self.expect(1, self.model, "--ids", "1", stderr_has=("eos_token_id",))
        self.write_generation_config('{"eos_token_id": 2, "eos_token_id": 3}')
        self.expect(1, self.model, "--ids", "1", stderr_has=("generation_config.json", "'eos_token_id' twice"))
        self.write_generation_config('{"bos_token_id": 300}')  # the vocabulary is 300
        self.expect(1, self.model, "--ids", "1",
                    stderr_has=("generation_config.json", "key 'bos_token_id' names token 300, outside"))
        self.write_generation_config('{"a": ' * 5000 + "1" + "}" * 5000)  # deep nesting: refused, no stack overflow
        self.expect(1, self.model, "--ids", "1", stderr_has=("generation_config.json", "nests deeper than 64"))
        os.remove(os.path.join(self.model, "generation_config.json"))
        os.mkfifo(os.path.join(self.model, "generation_config.json"))  # would block a reader forever
        self.expect(1, self.model, "--ids", "1", stderr_has=("generation_config.json", "not a regular file"))

    def test_a_large_generation_config_is_read_in_one_pass(self):
        # 1 MiB of keys: a reader that rescans its object per key took minutes on this (the subprocess timeout is
        # 60 s); the library's takes milliseconds.
        keys = ", ".join(f'"key_{i:06}": {i}' for i in range(60000))
        self.write_generation_config('{"eos_token_id": [2, 7], ' + keys + "}")
        self.assertGreater(os.path.getsize(os.path.join(self.model, "generation_config.json")), 1 << 20)
        self.expect_no_gpu(self.model, "--ids", "1")

    # ---- text prompts ----------------------------------------------------------------------------------------

    @unittest.skipIf(built_with_sentencepiece(), "this build reads SentencePiece models")
    def test_without_sentencepiece_a_text_prompt_is_refused_pointing_to_ids(self):
        with open(os.path.join(self.model, "tokenizer.model"), "wb") as f:
            f.write(b"not read")
        r = self.expect(2, self.model, "Once upon a time", stderr_has=("without SentencePiece", "--ids"))
        self.assertEqual(r.stdout, "")

    @unittest.skipUnless(built_with_sentencepiece(), "this build has no SentencePiece")
    def test_a_text_prompt_needs_a_tokenizer_model_that_sentencepiece_reads(self):
        self.expect(2, self.model, "Once upon a time",
                    stderr_has=("has neither tokenizer.json nor tokenizer.model", "--ids"))
        with open(os.path.join(self.model, "tokenizer.model"), "wb") as f:
            f.write(b"IQ== 0\nIg== 1\n")  # a tiktoken file, as Llama 3 ships under this name
        self.expect(1, self.model, "Once upon a time", stderr_has=("tokenizer.model", "not a SentencePiece model"))

    @unittest.skipUnless(built_with_sentencepiece(), "this build has no SentencePiece")
    def test_a_tokenizer_model_over_64_mib_is_refused_before_it_is_read(self):
        model_file = os.path.join(self.model, "tokenizer.model")
        with open(model_file, "wb") as f:
            f.truncate((64 << 20) + 1)  # sparse: nothing written, and nothing read if the size is checked first
        self.expect(1, self.model, "Once upon a time",
                    stderr_has=(f"{model_file}: 67108865 bytes, more than the 64 MiB a tokenizer.model may have",))
        os.remove(model_file)
        os.mkfifo(model_file)  # would block a reader forever
        self.expect(1, self.model, "Once upon a time", stderr_has=(model_file, "not a regular file"))

    @unittest.skipUnless(built_with_sentencepiece() and SPM_TRAIN and os.path.isfile(SPM_TRAIN),
                         "needs a build with SentencePiece and spm_train")
    def test_a_text_prompt_is_tokenized_and_checked_before_the_gpu(self):
        corpus = self.path("corpus.txt")
        with open(corpus, "w") as f:
            for i in range(200):
                f.write(f"Once upon a time there was a little model number {i} that ran on a graph.\n")
        subprocess.run([SPM_TRAIN, f"--input={corpus}", f"--model_prefix={self.path('spm')}", "--vocab_size=120",
                        "--model_type=bpe", "--hard_vocab_limit=false", "--bos_id=1", "--eos_id=2", "--unk_id=0",
                        "--minloglevel=2"], check=True, capture_output=True, timeout=120)
        os.replace(self.path("spm.model"), os.path.join(self.model, "tokenizer.model"))
        self.expect_no_gpu(self.model, "Once upon a time")
        self.expect_no_gpu(self.model, "--no-bos", "--", "-starts with a dash")
        self.expect(2, self.model, "Once upon a time " * 20, stderr_has=("does not fit the context of 64",
                                                                        "as tokenized"))
        self.expect(2, self.model, "", "--no-bos", stderr_has=("the prompt is empty",))

    def write_tokenizer_json(self, text):
        with open(os.path.join(self.model, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(text)

    def test_a_text_prompt_is_tokenized_with_tokenizer_json_first_and_checked_before_the_gpu(self):
        self.write_tokenizer_json(byte_level_tokenizer())
        with open(os.path.join(self.model, "tokenizer.model"), "wb") as f:
            f.write(b"not a SentencePiece model: tokenizer.json comes first")
        self.expect_no_gpu(self.model, "Once upon a time")
        self.expect_no_gpu(self.model, "Once upon a time", "--no-bos", "--stop", "</s>", "--stop", "\n\n", "--json")
        # One token a byte, and <|begin_of_text|> from the template: 63 bytes fit the context of 64, 64 do not.
        self.expect_no_gpu(self.model, "x" * 63)
        self.expect(2, self.model, "x" * 64, stderr_has=("does not fit the context of 64", "as tokenized"))
        self.expect_no_gpu(self.model, "x" * 64, "--no-bos")
        r = self.expect(2, self.model, b"caf\xc3\xa9 \xff", stderr_has=(
            "PROMPT: the text to encode is not UTF-8: byte 6 (of 7)",))
        self.assertNotIn("tokenizer.json", r.stderr)

    def test_a_tokenizer_json_that_cannot_be_used_is_refused_naming_the_file_and_key(self):
        tokenizer = os.path.join(self.model, "tokenizer.json")
        self.write_tokenizer_json('{"model": {"type": "WordPiece", "vocab": {}}}')
        self.expect(1, self.model, "hello", stderr_has=(
            f"{tokenizer}: model.type: the model 'WordPiece' is not implemented",))
        self.write_tokenizer_json('{"model": ')
        self.expect(1, self.model, "hello", stderr_has=(f"{tokenizer}: the tokenizer is not valid JSON",))
        self.write_tokenizer_json(byte_level_tokenizer(vocab_size=301))
        self.expect(1, self.model, "hello", stderr_has=(
            f"{tokenizer}: 301 tokens, more than the model's vocabulary of 300",))

    def test_stop_strings_need_a_text_prompt_and_a_character(self):
        self.expect(2, self.model, "--ids", "1", "--stop", "x",
                    stderr_has=("--stop needs a text prompt: with --ids the output is token ids",))
        self.expect(2, self.model, "hello", "--stop", "",
                    stderr_has=("--stop must be a string of at least one character, not ''",))
        self.expect_no_gpu(self.model, "--ids", "1", "--json")

    # ---- conversations -------------------------------------------------------------------------------------

    def write_chat_template(self, template, bos="<|begin_of_text|>"):
        with open(os.path.join(self.model, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"bos_token": bos, "eos_token": None, "chat_template": template}, f)

    # One token a byte, <|begin_of_text|> one token: "<|begin_of_text|><user>" + message + "<assistant>" is
    # 1 + 6 + len(message) + 11 tokens.
    TEMPLATE = ("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                "{% if add_generation_prompt %}<assistant>{% endif %}")

    def test_a_conversation_is_rendered_with_the_chat_template_then_tokenized_and_checked_before_the_gpu(self):
        self.write_tokenizer_json(byte_level_tokenizer())
        self.write_chat_template(self.TEMPLATE)
        self.expect_no_gpu(self.model, "--chat", "hi")
        self.expect_no_gpu(self.model, "--chat", "x" * 46, "--json", "--stop", "<user>")
        # 47 bytes fit the context of 64 as a plain prompt, not as a rendered user's message (65 tokens).
        self.expect_no_gpu(self.model, "x" * 47)
        self.expect(2, self.model, "--chat", "x" * 47, stderr_has=("does not fit the context of 64",))
        # --system puts a message in front: "<system>" and its text count too.
        self.expect(2, self.model, "--chat", "x" * 20, "--system", "y" * 20,
                    stderr_has=("does not fit the context of 64",))
        messages = self.path("messages.json")
        with open(messages, "w", encoding="utf-8") as f:
            json.dump([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"},
                       {"role": "user", "content": "caf\u00e9"}], f)
        self.expect_no_gpu(self.model, "--messages", messages, "--chat-vars", '{"enable_thinking": false}')

    def test_a_conversation_that_cannot_be_rendered_is_refused_naming_why(self):
        self.write_tokenizer_json(byte_level_tokenizer())
        config = os.path.join(self.model, "tokenizer_config.json")
        self.expect(1, self.model, "--chat", "hi", stderr_has=("chat template",))  # the folder has none
        self.write_chat_template("{% include 'other.jinja' %}")
        self.expect(1, self.model, "--chat", "hi", stderr_has=(config, "include"))
        self.write_chat_template("{% if messages[0].role != 'system' %}{{ raise_exception('a system message "
                                 "must come first') }}{% endif %}" + self.TEMPLATE)
        self.expect(2, self.model, "--chat", "hi", stderr_has=("--chat: ", "a system message must come first"))
        self.expect_no_gpu(self.model, "--chat", "hi", "--system", "be brief")
        messages = self.path("messages.json")
        for text, why in (('{"role": "user"}', "array"), ("[", "JSON")):
            with open(messages, "w", encoding="utf-8") as f:
                f.write(text)
            self.expect(2, self.model, "--messages", messages, stderr_has=(f"--messages '{messages}'", why))
        self.expect(2, self.model, "--messages", self.path("none.json"),
                    stderr_has=(f"--messages '{self.path('none.json')}' is not a file",))
        self.write_chat_template(self.TEMPLATE)
        self.expect(2, self.model, "--chat", "hi", "--chat-vars", "[1]", stderr_has=("--chat: ", "object"))

    def test_conversation_options_go_together_as_documented(self):
        self.expect(2, self.model, "--chat", stderr_has=("--chat needs a PROMPT",))
        self.expect(2, self.model, "hi", "--system", "s", stderr_has=("--system needs --chat",))
        self.expect(2, self.model, "hi", "--messages", "m.json", stderr_has=("give --messages or a prompt",))
        self.expect(2, self.model, "--chat", "hi", "--messages", "m.json", stderr_has=("give --messages or a prompt",))
        self.expect(2, self.model, "hi", "--chat-vars", "{}", stderr_has=("--chat-vars needs --chat or --messages",))
        self.expect(2, self.model, "--messages", "", stderr_has=("--messages must be a file",))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
