"""`1bit run` in a terminal, driven through a pty (pexpect) against the default Gemma 3 270M,
a base model without a chat template: text completion said once at the start with the
reply cap; Ctrl-C stops a reply and returns to the prompt, a second one at the empty
prompt quits; /clear, /save and /load (a round trip), /exit, an unknown command; a
20,000-character line is one message and one longer than the context is refused; a small
context drops the oldest turns and goes on; a chat template from a file; the KV cache is
reused across turns; piped stdin still works."""
import json
import os
import random
import re
import subprocess
import time

import pytest

from serverutil import BIN, default_model

pexpect = pytest.importorskip("pexpect")

PROMPT = r"\r> \x1b\[0K"  # the line editor drawing its prompt
TIMINGS = r"\[prompt: (\d+) tokens, [0-9.]+ tok/s \| generation: (\d+) tokens"


def spawn(*args, timeout=60):
    c = pexpect.spawn(BIN, ["run", "-m", default_model(), "-t", "2", "--temp", "0", *args], encoding="utf-8",
                      timeout=timeout, dimensions=(24, 100), env={**os.environ, "TERM": "xterm"})
    return c


def send_all(c, text):
    """Writes all of text to the terminal (one write to a pty may take only part of it)."""
    while text:
        text = text[c.send(text):]


def turn(c, text):
    """Sends a message; returns (prompt tokens, generated tokens) of its reply."""
    send_all(c, text + "\r")
    c.expect(TIMINGS)
    counts = int(c.match.group(1)), int(c.match.group(2))
    c.expect(PROMPT)
    return counts


def quit_with(c, keys):
    c.send(keys)
    c.expect(pexpect.EOF)
    c.close()
    assert c.exitstatus == 0, c.before


def test_base_model_notice_cap_and_exit():
    c = spawn()
    c.expect("has no chat template: text completion")
    c.expect(r"replies stop at 256 tokens \(-n N")
    c.expect(PROMPT)
    quit_with(c, "/exit\r")

    c = spawn("-n", "8")
    c.expect("replies stop at 8 tokens")
    c.expect(PROMPT)
    n_prompt, n_gen = turn(c, "The capital of France is")
    assert 1 <= n_gen <= 8
    quit_with(c, "/quit\r")


def test_ctrl_c_stops_a_reply_and_twice_quits():
    c = spawn("-n", "-1")
    c.expect("replies have no length cap")
    c.expect(PROMPT)
    c.send("Once upon a time, in a land far away,\r")
    c.expect(r"\x1b\[\?2004l")          # the line editor has let the line go
    c.expect(r"[A-Za-z]{3}")               # the reply is streaming
    time.sleep(1)
    c.sendcontrol("c")
    c.expect(TIMINGS, timeout=20)
    assert 0 < int(c.match.group(2)) < 3000
    c.expect(PROMPT)
    # the chat goes on after the interrupted reply
    c.send("/help\r")
    c.expect("/save FILE")
    c.expect(PROMPT)
    # Ctrl-C at an empty prompt says how to quit; a second one quits
    c.sendcontrol("c")
    c.expect("Ctrl-C again")
    c.expect(PROMPT)
    c.sendcontrol("c")
    c.expect(pexpect.EOF)
    c.close()
    assert c.exitstatus == 0

    # right after an interrupted reply, one Ctrl-C at the empty prompt quits; Ctrl-D too
    c = spawn("-n", "-1")
    c.expect(PROMPT)
    c.send("The history of the Roman Empire\r")
    c.expect(r"\x1b\[\?2004l")
    c.expect(r"[A-Za-z]{3}")
    c.sendcontrol("c")
    c.expect(TIMINGS, timeout=20)
    c.expect(PROMPT)
    c.sendcontrol("c")
    c.expect(pexpect.EOF)
    c.close()
    assert c.exitstatus == 0
    c = spawn()
    c.expect(PROMPT)
    quit_with(c, "\x04")


def test_clear_save_load_round_trip(tmp_path):
    c = spawn("-n", "8")
    c.expect(PROMPT)
    turn(c, "The capital of France is")
    # line editing: two steps left, insert, so "abc" becomes "aXbc"
    turn(c, "abc\x1b[D\x1b[DX")
    f1, f2, f3 = (str(tmp_path / n) for n in ("one.json", "two.json", "three.json"))
    c.send(f"/save {f1}\r")
    c.expect("saved 4 messages")
    c.expect(PROMPT)
    saved = json.load(open(f1))
    assert [m["role"] for m in saved] == ["user", "assistant", "user", "assistant"]
    assert saved[0]["content"] == "The capital of France is" and saved[2]["content"] == "aXbc"
    c.send("/clear\r")
    c.expect("forgotten")
    c.expect(PROMPT)
    c.send(f"/save {f2}\r")
    c.expect("saved 0 messages")
    c.expect(PROMPT)
    assert json.load(open(f2)) == []
    c.send(f"/load {f1}\r")
    c.expect("loaded 4 messages")
    c.expect(PROMPT)
    c.send(f"/save {f3}\r")
    c.expect("saved 4 messages")
    c.expect(PROMPT)
    assert json.load(open(f3)) == saved
    # a file that is not a conversation, a missing one, a command we lack: one line each
    c.send(f"/load {f2}x\r")
    c.expect("/load: ")
    c.expect(PROMPT)
    open(f2, "w").write('[{"role": "tool", "content": "x"}]')
    c.send(f"/load {f2}\r")
    c.expect("roles are user and assistant")
    c.expect(PROMPT)
    c.send("/frobnicate\r")
    c.expect(r"unknown command /frobnicate \(/help")
    c.expect(PROMPT)
    # the loaded conversation goes on: only the new message is decoded
    n_prompt, _ = turn(c, "The capital of Spain is")
    assert n_prompt < 30
    quit_with(c, "/exit\r")


def test_long_lines(tmp_path):
    c = spawn("-n", "4", "-c", "4096", timeout=120)
    c.expect(PROMPT)
    long_line = "x" * 20000
    n_prompt, _ = turn(c, long_line)
    assert n_prompt > 2000  # all of it, not a 4,096-byte terminal line
    random.seed(1)
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()
    huge = " ".join(random.choice(words) for _ in range(8000))
    send_all(c, huge + "\r")
    c.expect(r"that message is (\d+) tokens, more than the context holds \(4096")
    assert int(c.match.group(1)) > 4096
    c.expect(PROMPT)
    n_prompt, n_gen = turn(c, "The capital of France is")
    assert n_prompt < 30 and n_gen >= 1
    saved = str(tmp_path / "long.json")
    c.send(f"/save {saved}\r")
    c.expect("saved 4 messages")
    c.expect(PROMPT)
    assert json.load(open(saved))[0]["content"] == long_line
    quit_with(c, "\x04")


def test_small_context_drops_old_turns():
    c = spawn("-n", "24", "-c", "256", "-sys", "Short facts about animals.")
    c.expect(PROMPT)
    animals = ["cats", "dogs", "horses", "owls", "frogs", "whales", "bees", "wolves", "eagles", "sharks",
               "otters", "camels"]
    drops = 0
    for a in animals:
        send_all(c, f"Here is a fact about {a}:\r")
        if c.expect(["outgrew the context", TIMINGS]) == 0:
            drops += 1
            c.expect("kept the system prompt")
            c.expect(TIMINGS)
        assert int(c.match.group(2)) >= 1  # an answer every turn
        c.expect(PROMPT)
    assert drops >= 1
    assert c.isalive()
    quit_with(c, "/exit\r")


GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n"
    "{{ m['content'] | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def test_chat_template_file_and_kv_reuse(tmp_path):
    tmpl = tmp_path / "gemma.jinja"
    tmpl.write_text(GEMMA_TEMPLATE)
    c = spawn("-n", "16", "--chat-template-file", str(tmpl))
    c.expect("chatting with")
    c.expect("replies stop at 16 tokens")
    c.expect(PROMPT)
    p1, g1 = turn(c, "Hello! What is the capital of France?")
    p2, g2 = turn(c, "And of Spain?")
    # the second turn decodes its own message (and the turn markers), not the conversation
    assert p2 < p1 + g1 and p2 < 30
    quit_with(c, "/exit\r")


def test_piped_stdin_and_prompt_flag():
    r = subprocess.run([BIN, "run", "-m", default_model(), "-t", "2", "--temp", "0", "-n", "6"],
                       input="The capital of France is\n/exit\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    assert "text completion" in r.stderr and re.search(TIMINGS, r.stderr)
    r = subprocess.run([BIN, "run", "-m", default_model(), "-t", "2", "--temp", "0", "-n", "6", "-p", "Hello"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() and "text completion" not in r.stderr


def test_chat_template_kwargs(tmp_path):
    """--chat-template-kwargs on `1bit run` as on serve: the variables reach the template (one
    that stops with them in its message shows them); a value that is no JSON object is a
    flag error before the model loads."""
    tmpl = tmp_path / "kw.jinja"
    tmpl.write_text("{{ raise_exception('mood=' ~ mood ~ ' think=' ~ enable_thinking) }}")
    model = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "models",
                         "gemma3.gguf")
    r = subprocess.run([BIN, "run", "-m", model, "--chat-template-file", str(tmpl), "--chat-template-kwargs",
                        '{"mood": "calm", "enable_thinking": false}'], input="hi\n", capture_output=True, text=True,
                       timeout=120)
    assert "mood=calm think=False" in r.stdout + r.stderr, r.stdout + r.stderr
    r = subprocess.run([BIN, "run", "-m", model, "--chat-template-kwargs", "[1]"], capture_output=True, text=True,
                       timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "--chat-template-kwargs" in lines[0], r.stderr
