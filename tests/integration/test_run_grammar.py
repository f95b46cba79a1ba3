"""`1bit run` under llama.cpp's grammar flags (--grammar, --grammar-file, -j / --json-schema,
--json-schema-file), the same ones `1bit serve` takes server-wide, on the tiny Qwen3
fixture: a -p completion under a JSON schema parses as JSON that follows it (sampled, over
several seeds; with a draft model too), a two-word alternation gives one of its words, the
terminal chat's every reply follows the grammar, and a bad grammar or schema is exit 2 with
one line naming its flag."""
import json
import os
import subprocess

import pytest

from serverutil import BIN, ROOT

jsonschema = pytest.importorskip("jsonschema")

MODEL = os.path.join(ROOT, "tests", "fixtures", "models", "qwen3.gguf")

SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "kind": {"enum": ["cat", "dog", "bird"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 999},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 3},
        "inner": {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"],
                  "additionalProperties": False},
    },
    "required": ["ok", "kind", "n", "tags", "inner"],
    "additionalProperties": False,
}


def run(*args, stdin=None):
    return subprocess.run([BIN, "run", "-m", MODEL, "-t", "2", *args], input=stdin, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("seed", range(6))
def test_json_schema_output_follows_the_schema(seed):
    p = run("-p", "A JSON object:", "-j", json.dumps(SCHEMA), "-n", "400", "--temp", "0.9", "--seed", str(seed))
    assert p.returncode == 0, p.stderr
    jsonschema.validate(json.loads(p.stdout), SCHEMA)


def test_json_schema_file_with_a_draft_model(tmp_path):
    f = tmp_path / "schema.json"
    f.write_text(json.dumps(SCHEMA))
    plain = run("-p", "A JSON object:", "--json-schema-file", str(f), "-n", "400", "--temp", "0")
    assert plain.returncode == 0, plain.stderr
    jsonschema.validate(json.loads(plain.stdout), SCHEMA)
    # the draft's proposals are verified under the grammar: the same text as plain decoding
    spec = run("-p", "A JSON object:", "--json-schema-file", str(f), "-n", "400", "--temp", "0", "-md", MODEL,
               "--draft-p-min", "0")
    assert spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout


@pytest.mark.parametrize("seed", range(4))
def test_grammar_alternation_gives_one_word(seed):
    p = run("-p", "Pick one:", "--grammar", 'root ::= "apple" | "banana"', "--temp", "1.0", "--seed", str(seed))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() in ("apple", "banana"), p.stdout


def test_grammar_file_holds_every_chat_reply(tmp_path):
    f = tmp_path / "yn.gbnf"
    f.write_text('root ::= ("yes" | "no") "."\n')
    p = run("--grammar-file", str(f), "-n", "16", stdin="first line\nsecond line\nthird line\n")
    assert p.returncode == 0, p.stderr
    replies = [l for l in p.stdout.splitlines() if l.strip()]
    assert len(replies) == 3 and all(r in ("yes.", "no.") for r in replies), p.stdout


@pytest.mark.parametrize("args,needle", [
    (["--grammar", "root ::= ("], "--grammar"),
    (["--grammar-file", "/nonexistent/x.gbnf"], "--grammar-file"),
    (["-j", "{not json"], "--json-schema"),
    (["--json-schema", '{"type": "object", "properties": 3}'], "--json-schema"),
    (["--json-schema-file", "/nonexistent/s.json"], "--json-schema-file"),
    (["--grammar", 'root ::= "a"', "-j", "{}"], "one of"),
    (["--grammar"], "--grammar"),
])
def test_bad_grammar_is_a_flag_error(args, needle):
    p = run("-p", "hi", *args)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("1bit run: ") and needle in lines[0], p.stderr
