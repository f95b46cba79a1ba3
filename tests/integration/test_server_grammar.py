"""Structured output on the real Gemma 3 270M: GBNF `grammar`, `json_schema` and
`response_format` (llama-server's and OpenAI's forms) on /completion, /v1/completions and
/v1/chat/completions (whole and streamed), Anthropic's output_config.format and the
Responses API's text.format; bad grammars and schemas are 400s; and a few hundred sampled
objects (several schemas, seeds, temperatures) all valid under the `jsonschema` package."""
import json
import re

import jsonschema
import pytest
import requests

from serverutil import Server, default_model


@pytest.fixture(scope="module")
def srv():
    s = Server(["-np", "16", "-c", "16384"])
    yield s
    assert s.stop()[0] == 0


def post(srv, path, body):
    return requests.post(srv.url + path, json=body, timeout=300)


def chat(srv, extra, content="Give me an example as JSON.", **kw):
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 64, "seed": 1}
    body.update(extra)
    body.update(kw)
    r = post(srv, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"]}


def test_grammar_completion_and_chat(srv):
    """llama-server's suite: 'root ::= "a"{5,5}' gives exactly five a's, then the end."""
    g = 'root ::= "a"{5,5}'
    r = post(srv, "/completion", {"prompt": "Say something:", "grammar": g, "n_predict": 8, "seed": 3})
    d = r.json()
    assert r.status_code == 200 and d["content"] == "aaaaa" and d["stop_type"] == "eos", d
    assert d["generation_settings"]["grammar"] == g
    c = chat(srv, {"grammar": g, "max_tokens": 6})["choices"][0]
    assert c["message"]["content"] == "aaaaa" and c["finish_reason"] == "stop"
    # alternatives, greedy and sampled; UTF-8 characters in the grammar
    g = 'root ::= ("yes" | "no" | "peut-\u00eatre") "."'
    for seed in range(4):
        c = chat(srv, {"grammar": g, "temperature": 1.5, "seed": seed}, content="Is the sea blue?")["choices"][0]
        assert c["message"]["content"] in ("yes.", "no.", "peut-\u00eatre."), c
    # /v1/completions takes it too
    r = post(srv, "/v1/completions", {"prompt": "Count:", "grammar": 'root ::= [0-9]{3} " " [a-z]{2,4}', "max_tokens": 12})
    assert r.status_code == 200 and re.fullmatch(r"[0-9]{3} [a-z]{2,4}", r.json()["choices"][0]["text"])


def test_ignore_eos_stops_when_the_grammar_is_done(srv):
    """With the end token switched off, a complete grammar allows nothing more: the reply
    ends there ("stop"), never runs on to max_tokens."""
    c = chat(srv, {"grammar": 'root ::= "ok"', "ignore_eos": True, "max_tokens": 20})["choices"][0]
    assert c["message"]["content"] == "ok" and c["finish_reason"] == "stop"


def test_schema_forms(srv):
    import openai
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    # OpenAI's json_schema form through the official client
    r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "A person as JSON."}],
                                    max_tokens=64, seed=7,
                                    response_format={"type": "json_schema",
                                                     "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
    # llama-server's json_object with a schema, json_object alone (any object), top-level json_schema
    jsonschema.validate(json.loads(chat(srv, {"response_format": {"type": "json_object", "schema": PERSON}})
                                   ["choices"][0]["message"]["content"]), PERSON)
    for seed in range(3):  # any object: complete ones parse, a cut one is still an object's start
        c = chat(srv, {"response_format": {"type": "json_object"}, "max_tokens": 48, "seed": seed})["choices"][0]
        text = c["message"]["content"]
        assert text.startswith("{"), text
        if c["finish_reason"] == "stop":
            assert isinstance(json.loads(text), dict)
    jsonschema.validate(json.loads(chat(srv, {"json_schema": PERSON})["choices"][0]["message"]["content"]), PERSON)
    # llama-server's suite: a const, and a tuple of one integer
    assert chat(srv, {"response_format": {"type": "json_object", "schema": {"const": "42"}}, "max_tokens": 6}
                )["choices"][0]["message"]["content"].strip() == '"42"'
    t = chat(srv, {"response_format": {"type": "json_object", "schema": {"items": [{"type": "integer"}]}},
                   "max_tokens": 24})["choices"][0]["message"]["content"]
    assert re.fullmatch(r"\[\s*-?\d+\s*\]\s*", t), t
    # the native route and the legacy completions route
    r = post(srv, "/completion", {"prompt": "A person as JSON:", "json_schema": PERSON, "n_predict": 64, "seed": 2}).json()
    jsonschema.validate(json.loads(r["content"]), PERSON)
    assert "root ::=" in r["generation_settings"]["grammar"]
    r = post(srv, "/v1/completions", {"prompt": "A person as JSON:", "json_schema": PERSON, "max_tokens": 64, "seed": 2})
    jsonschema.validate(json.loads(r.json()["choices"][0]["text"]), PERSON)
    # /completion: a grammar next to a schema wins, as in llama-server
    r = post(srv, "/completion", {"prompt": "x", "json_schema": PERSON, "grammar": 'root ::= "z"', "n_predict": 4}).json()
    assert r["content"] == "z"
    # streamed: the deltas join into a valid object
    body = {"messages": [{"role": "user", "content": "A person as JSON."}], "max_tokens": 64, "seed": 4,
            "stream": True, "response_format": {"type": "json_schema", "json_schema": {"schema": PERSON}}}
    text = ""
    with requests.post(srv.url + "/v1/chat/completions", json=body, stream=True, timeout=300) as resp:
        for line in resp.iter_lines():
            if line.startswith(b"data: {"):
                ch = json.loads(line[6:])["choices"]
                if ch:
                    text += ch[0]["delta"].get("content") or ""
    jsonschema.validate(json.loads(text), PERSON)


def test_anthropic_and_responses_formats(srv):
    body = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "A person as JSON."}],
            "output_config": {"format": {"type": "json_schema", "schema": PERSON}}}
    r = post(srv, "/v1/messages", body)
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["content"][0]["text"]), PERSON)
    body = {"model": "m", "max_output_tokens": 64, "input": "A person as JSON.",
            "text": {"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}}}
    r = post(srv, "/v1/responses", body)
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["output"][0]["content"][0]["text"]), PERSON)


def test_logprobs_under_a_grammar(srv):
    """n_probs still reports the model's own distribution; post-sampling probabilities are
    those the grammar leaves: every listed token keeps to it."""
    g = 'root ::= ("red" | "green" | "blue") "!"'
    r = post(srv, "/completion", {"prompt": "A colour:", "grammar": g, "n_predict": 6, "n_probs": 3,
                                  "post_sampling_probs": True, "seed": 1, "temperature": 1.0}).json()
    assert re.fullmatch(r"(red|green|blue)!", r["content"]), r["content"]
    first = r["completion_probabilities"][0]
    assert first["top_probs"] and sum(t["prob"] for t in first["top_probs"]) <= 1.0001
    for t in first["top_probs"]:
        assert any(w.startswith(t["token"]) for w in ("red!", "green!", "blue!")), first


def test_draft_model_keeps_the_grammar(srv):
    """With a draft model (the model itself), proposals are verified under the grammar:
    the replies equal plain decoding's, greedy and sampled."""
    d = Server(["-np", "1", "-c", "2048", "-md", default_model()])
    try:
        for temp in (0, 0.9):
            extra = {"json_schema": PERSON, "temperature": temp, "seed": 3}
            want = chat(srv, extra)["choices"][0]["message"]["content"]
            got = chat(d, extra)
            assert got["choices"][0]["message"]["content"] == want
            assert got["timings"]["draft_n"] > 0
    finally:
        assert d.stop()[0] == 0


@pytest.mark.parametrize("extra,words", [
    ({"grammar": "root ::= this is (not valid GBNF"}, "line 1, column 18"),
    ({"grammar": 'root ::= "a" undefined-rule'}, "undefined rule 'undefined-rule'"),
    ({"grammar": 'root ::= root "a" | "b"'}, "left-recursive"),
    ({"grammar": 42}, "'grammar' must be a string"),
    ({"json_schema": {"type": "hiccup"}}, "unknown type 'hiccup'"),
    ({"json_schema": {"type": 123}}, "'type' must be"),
    ({"response_format": {"type": "json_object", "schema": 123}}, "must be an object"),
    ({"response_format": {"type": "sound"}}, "response_format type"),
    ({"json_schema": {"type": "string", "pattern": "(a)\\1"}}, "backreferences"),
    ({"json_schema": {"not": {"type": "string"}}}, "'not' is not supported"),
    ({"json_schema": {"$ref": "#/$defs/nope"}}, "does not resolve"),
    ({"grammar": 'root ::= "a"', "json_schema": {"const": 1}}, "Cannot use both"),
])
def test_bad_grammar_or_schema_is_400(srv, extra, words):
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
    body.update(extra)
    r = post(srv, "/v1/chat/completions", body)
    assert r.status_code == 400, r.text
    e = r.json()["error"]
    assert e["type"] == "invalid_request_error" and words in e["message"], e
    if "grammar" in extra and "json_schema" not in extra:
        r = post(srv, "/completion", {"prompt": "x", "n_predict": 4, **extra})
        assert r.status_code == 400 and words in r.json()["error"]["message"]


SCHEMAS = [
    PERSON,
    {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 4},
    {"type": "object", "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"},
                                      "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3}},
     "required": ["id", "ok"]},
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9},
                                                       "y": {"type": "integer", "minimum": -9, "maximum": 9}},
                      "required": ["x", "y"]}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"anyOf": [{"$ref": "#/$defs/pt"}, {"type": "null"}]},
                                      "when": {"type": "string", "format": "date"}},
     "required": ["a", "b", "when"]},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
                                      "level": {"type": ["integer", "null"]}, "note": {"type": "string", "maxLength": 10}},
     "required": ["code", "level"]},
]


def test_many_sampled_objects_validate(srv):
    """210 objects: 5 schemas x 3 temperatures x 14 choices (one request of n = 14 each,
    decoded together), every one complete and valid."""
    prompts = ["Give me an example as JSON.", "Write JSON for a test fixture.", "Output some data in JSON."]
    n_valid = 0
    for i, schema in enumerate(SCHEMAS):
        for k, temp in enumerate((0.6, 1.0, 1.3)):
            d = chat(srv, {"response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}},
                     content=prompts[k], n=14, temperature=temp, seed=100 * i + k, max_tokens=96)
            assert len(d["choices"]) == 14
            for c in d["choices"]:
                assert c["finish_reason"] == "stop", (schema, c)
                obj = json.loads(c["message"]["content"])
                jsonschema.validate(obj, schema)
                if "when" in schema.get("properties", {}):
                    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", obj["when"])
                n_valid += 1
    assert n_valid >= 200


# ---- the server-wide grammar: --grammar, --grammar-file, -j / --json-schema(-file) ----

COUNT = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["n"]}


def test_server_json_schema_is_every_requests_default(tmp_path):
    s = Server(["-np", "2", "-c", "1024", "-j", json.dumps(COUNT)])
    try:
        for seed in range(3):
            r = post(s, "/completion", {"prompt": "A number:", "n_predict": 24, "seed": seed, "temperature": 0.8})
            assert r.status_code == 200, r.text
            jsonschema.validate(json.loads(r.json()["content"]), COUNT)
        # a request's own grammar replaces the server's
        r = post(s, "/completion", {"prompt": "Yes or no?", "n_predict": 4, "grammar": 'root ::= "yes" | "no"'})
        assert r.status_code == 200 and r.json()["content"] in ("yes", "no")
        c = chat(s, {}, max_tokens=24)
        jsonschema.validate(json.loads(c["choices"][0]["message"]["content"]), COUNT)
    finally:
        assert s.stop()[0] == 0


def test_server_grammar_file(tmp_path):
    f = tmp_path / "ab.gbnf"
    f.write_text('root ::= ("a" | "b")+ "."\n')
    s = Server(["-np", "1", "-c", "512", "--grammar-file", str(f)])
    try:
        r = post(s, "/completion", {"prompt": "Letters:", "n_predict": 12, "temperature": 0.0})
        assert r.status_code == 200 and re.fullmatch(r"[ab]+\.?", r.json()["content"]), r.text
    finally:
        assert s.stop()[0] == 0


@pytest.mark.parametrize("args,needle", [
    (["--grammar", "root ::= ("], "--grammar"),
    (["-j", "{not json"], "--json-schema"),
    (["--json-schema", '{"type": "object", "properties": 3}'], "--json-schema"),
    (["--grammar-file", "/nonexistent/x.gbnf"], "--grammar-file"),
    (["--grammar", 'root ::= "a"', "-j", "{}"], "one of"),
])
def test_bad_server_grammar_stops_the_start(args, needle):
    import subprocess
    from serverutil import BIN, free_port
    p = subprocess.run([BIN, "serve", "-m", default_model(), "--port", str(free_port())] + args,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = [l for l in p.stderr.splitlines() if l.startswith("1bit serve:")]
    assert len(lines) == 1 and needle in lines[0], p.stderr
