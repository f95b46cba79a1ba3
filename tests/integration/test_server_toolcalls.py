"""Tool calls on the real Gemma 3 270M: replies read into OpenAI's `tool_calls`,
Anthropic's `tool_use` blocks and the Responses API's `function_call` items, whole and
streamed (through the official `openai` and `anthropic` clients, whose types the replies
must validate against), with `tool_choice` required, a named function, none and auto;
`parallel_tool_calls: false`; arguments valid under each tool's schema (the grammar holds
them); Qwen3's template (Hermes markup), Qwen3-Coder's XML and GLM's markup through
templates that use them; a lazy grammar started by its trigger in the middle of a reply;
and the requests that must be refused. A model this small does not call tools by itself:
`required` makes the grammar force a call through the whole path, and a conversation
that already holds calls leads it to write one with `auto`."""
import json
import os

import jsonschema
import pytest
import requests

from serverutil import ROOT, Server

WEATHER = {"type": "object", "properties": {"location": {"type": "string", "maxLength": 16},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 9}},
           "required": ["location", "days"]}
SEARCH = {"type": "object", "properties": {"query": {"type": "string", "maxLength": 24}}, "required": ["query"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "search", "description": "Searches the web", "parameters": SEARCH}}]
SCHEMAS = {"get_weather": WEATHER, "search": SEARCH}
ASK = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]


@pytest.fixture(scope="module")
def srv():
    s = Server(["-np", "4", "-c", "8192", "--temp", "0"])
    yield s
    assert s.stop()[0] == 0


def post(srv, path, body):
    return requests.post(srv.url + path, json=body, timeout=300)


def chat(srv, **kw):
    body = {"messages": ASK, "tools": TOOLS, "max_tokens": 64}
    body.update(kw)
    r = post(srv, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def check_call(name, args):
    assert name in SCHEMAS, name
    jsonschema.validate(json.loads(args), SCHEMAS[name])


def stream_chat(srv, body):
    """The SSE chunks of a streamed chat, as JSON."""
    out = []
    with requests.post(srv.url + "/v1/chat/completions", json=dict(body, stream=True), stream=True, timeout=300) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith(b"data: {"):
                out.append(json.loads(line[6:]))
    return out


def test_required_call_openai_shape(srv):
    from openai.types.chat import ChatCompletion
    d = chat(srv, tool_choice="required", parallel_tool_calls=False)
    ChatCompletion.model_validate(d)  # the openai package's own types
    c = d["choices"][0]
    assert c["finish_reason"] == "tool_calls", c
    m = c["message"]
    assert m["content"] is None and len(m["tool_calls"]) == 1, m
    tc = m["tool_calls"][0]
    assert tc["type"] == "function" and tc["id"].startswith("call_") and len(tc["id"]) > 10
    assert isinstance(tc["function"]["arguments"], str)
    check_call(tc["function"]["name"], tc["function"]["arguments"])


def test_named_function_and_client(srv):
    import openai
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    r = oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, max_tokens=64,
                                    tool_choice={"type": "function", "function": {"name": "search"}})
    calls = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls" and len(calls) == 1 and calls[0].function.name == "search"
    check_call("search", calls[0].function.arguments)
    # the history a client sends back is accepted, and the template renders it
    history = ASK + [r.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": calls[0].id, "content": "Sunny, 21 C"}]
    r2 = oai.chat.completions.create(model="m", messages=history, tools=TOOLS, max_tokens=8, tool_choice="none")
    assert r2.choices[0].message.tool_calls is None and r2.choices[0].finish_reason in ("stop", "length")


def test_streamed_calls_equal_the_whole_reply(srv):
    """Deltas as llama-server sends them: the call's index, id, type and name first, then
    argument fragments that join into the arguments of the same request unstreamed; the
    markup never reaches delta.content."""
    body = {"messages": ASK, "tools": TOOLS, "max_tokens": 64, "tool_choice": "required", "parallel_tool_calls": False}
    whole = chat(srv, **{k: v for k, v in body.items() if k not in ("messages", "tools")})
    want = whole["choices"][0]["message"]["tool_calls"][0]
    chunks = stream_chat(srv, body)
    from openai.types.chat import ChatCompletionChunk
    for ch in chunks:
        ChatCompletionChunk.model_validate(ch)
    deltas = [ch["choices"][0]["delta"] for ch in chunks if ch["choices"]]
    assert all("<tool_call>" not in (d.get("content") or "") for d in deltas)
    tcs = [t for d in deltas for t in d.get("tool_calls") or []]
    assert tcs and tcs[0]["index"] == 0 and tcs[0]["id"].startswith("call_") and tcs[0]["type"] == "function"
    assert tcs[0]["function"]["name"] == want["function"]["name"]
    assert all("id" not in t and "name" not in t["function"] for t in tcs[1:])
    assert "".join(t["function"].get("arguments", "") for t in tcs) == want["function"]["arguments"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # through the official client's stream too
    import openai
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    args, names = "", []
    for ev in oai.chat.completions.create(model="m", stream=True, **body):
        for t in ev.choices[0].delta.tool_calls or [] if ev.choices else []:
            args += t.function.arguments or ""
            if t.function.name:
                names.append(t.function.name)
    assert names == [want["function"]["name"]] and args == want["function"]["arguments"]


def test_parallel_calls_and_tool_choice_none(srv):
    d = chat(srv, tool_choice="required", max_tokens=120)
    c = d["choices"][0]
    for tc in c["message"].get("tool_calls") or []:
        check_call(tc["function"]["name"], tc["function"]["arguments"])
    assert c["message"]["tool_calls"], c
    # none: no tools in the prompt, nothing read as a call
    with_none = post(srv, "/apply-template", {"messages": ASK, "tools": TOOLS, "tool_choice": "none"}).json()["prompt"]
    assert with_none == post(srv, "/apply-template", {"messages": ASK}).json()["prompt"]
    assert "get_weather" in post(srv, "/apply-template", {"messages": ASK, "tools": TOOLS}).json()["prompt"]
    m = chat(srv, tool_choice="none", max_tokens=16)["choices"][0]
    assert "tool_calls" not in m["message"] and m["finish_reason"] in ("stop", "length")


def test_anthropic_tool_use(srv):
    import anthropic
    a = anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    kw = dict(model="m", max_tokens=64, messages=ASK, tools=tools,
              tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})
    m = a.messages.create(**kw)
    assert m.stop_reason == "tool_use" and [b.type for b in m.content] == ["tool_use"], m
    tu = m.content[0]
    assert tu.name == "get_weather" and tu.id.startswith("toolu_") and isinstance(tu.input, dict)
    jsonschema.validate(tu.input, WEATHER)
    with a.messages.stream(**kw) as st:
        final = st.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[0].type == "tool_use"
    assert final.content[0].input == tu.input and final.content[0].name == "get_weather"
    # the raw events: a tool_use block opened with an empty input, then input_json_delta
    raw = requests.post(srv.url + "/v1/messages", json=dict(kw, stream=True), timeout=300).text
    events = [json.loads(l[6:]) for l in raw.splitlines() if l.startswith("data: ")]
    start = next(e for e in events if e["type"] == "content_block_start")
    assert start["content_block"]["type"] == "tool_use" and start["content_block"]["input"] == {}
    parts = [e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"]
    assert json.loads("".join(parts)) == tu.input
    # any: some tool; the result goes back as tool_result
    m2 = a.messages.create(**dict(kw, tool_choice={"type": "any"}))
    assert m2.content[-1].type == "tool_use"
    follow = ASK + [{"role": "assistant", "content": [b.model_dump() for b in m2.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": m2.content[-1].id,
                                                  "content": "Sunny"}]}]
    m3 = a.messages.create(model="m", max_tokens=8, messages=follow, tools=tools, tool_choice={"type": "none"})
    assert m3.stop_reason in ("end_turn", "max_tokens") and all(b.type != "tool_use" for b in m3.content)


def test_responses_function_call(srv):
    import openai
    oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    tools = [dict(type="function", **t["function"]) for t in TOOLS]
    kw = dict(model="m", input="What is the weather in Paris for the next 3 days?", tools=tools,
              tool_choice="required", parallel_tool_calls=False, max_output_tokens=64)
    r = oai.responses.create(**kw)
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and len(calls) == 1, r
    assert calls[0].call_id.startswith("call_") and calls[0].id.startswith("fc_")
    check_call(calls[0].name, calls[0].arguments)
    types, args, final = [], "", None
    for e in oai.responses.create(stream=True, **kw):
        types.append(e.type)
        if e.type == "response.function_call_arguments.delta":
            args += e.delta
        if e.type == "response.completed":
            final = e.response
    assert types[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert "response.function_call_arguments.done" in types and "response.output_text.delta" not in types
    fc = [o for o in final.output if o.type == "function_call"]
    assert len(fc) == 1 and fc[0].arguments == args == calls[0].arguments
    # a named function in the Responses API's shape
    r = oai.responses.create(**dict(kw, tool_choice={"type": "function", "name": "search"}))
    assert [o.name for o in r.output if o.type == "function_call"] == ["search"]


@pytest.mark.parametrize("body,words", [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not among the tools"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": 3}, "tool_choice"),
    ({"tool_choice": "required", "tools": None}, "needs 'tools'"),
    ({"tool_choice": "required", "grammar": 'root ::= "x"'}, "grammar"),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "grammar"),
    ({"parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"tool_choice": "required", "tools": [{"type": "function", "function": {
        "name": "odd", "parameters": {"type": "object", "properties": {"x": {"type": "number", "minimum": 1}}}}}]},
     "odd"),
])
def test_refused(srv, body, words):
    b = {"messages": ASK, "tools": TOOLS, "max_tokens": 4}
    b.update(body)
    r = post(srv, "/v1/chat/completions", b)
    assert r.status_code == 400 and words in r.json()["error"]["message"], r.text


def test_unenforceable_schema_with_auto_still_answers(srv):
    tools = [{"type": "function", "function": {"name": "odd", "parameters": {
        "type": "object", "properties": {"x": {"type": "number", "minimum": 1}}}}}]
    r = post(srv, "/v1/chat/completions", {"messages": ASK, "tools": tools, "max_tokens": 4})
    assert r.status_code == 200


# ---- other templates: their markup, a lazy trigger, thinking ------------------------------

def template(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


QWEN3 = os.path.join(ROOT, "..", "shared", "data", "tokenizers", "qwen3", "tokenizer_config.json")

# Qwen3-Coder's layout and GLM-4.5's, cut down to what the tests need: tools listed, calls
# in history rendered in the family's markup, a generation prompt.
CODER = """{%- for m in messages -%}
{%- if m.role == 'system' or m.role == 'user' %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% elif m.role == 'assistant' %}<|im_start|>assistant
{{ m.content }}{% for tc in m.tool_calls or [] %}<tool_call>
<function={{ tc.function.name }}>
{% for k, v in tc.function.arguments.items() %}<parameter={{ k }}>
{{ v }}
</parameter>
{% endfor %}</function>
</tool_call>{% endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>{{ m.content }}</tool_response><|im_end|>
{% endif %}{%- endfor -%}
{%- if tools %}<|im_start|>system
Tools: {% for t in tools %}{{ t.function.name }} {% endfor %}<|im_end|>
{% endif %}<|im_start|>assistant
"""
GLM = """[gMASK]<sop>{%- for m in messages -%}
{%- if m.role == 'user' %}<|user|>
{{ m.content }}{% elif m.role == 'assistant' %}<|assistant|>
{{ m.content }}{% for tc in m.tool_calls or [] %}
<tool_call>{{ tc.function.name }}
{% for k, v in tc.function.arguments.items() %}<arg_key>{{ k }}</arg_key>
<arg_value>{{ v }}</arg_value>
{% endfor %}</tool_call>{% endfor %}{% elif m.role == 'tool' %}<|observation|>
<tool_response>{{ m.content }}</tool_response>{% endif %}{%- endfor -%}
{%- if tools %}Tools: {% for t in tools %}{{ t.function.name }} {% endfor %}{% endif %}<|assistant|>
"""


@pytest.mark.parametrize("name,text", [("coder.jinja", CODER), ("glm.jinja", GLM)])
def test_xml_formats_end_to_end(tmp_path, name, text):
    """The grammar writes the family's markup, the reader turns it back into JSON arguments
    typed by the schema (days an integer, location a string)."""
    s = Server(["--chat-template-file", template(tmp_path, name, text), "--temp", "0", "-c", "4096"])
    try:
        for stream in (False, True):
            body = {"messages": ASK, "tools": TOOLS, "max_tokens": 80, "tool_choice": "required",
                    "parallel_tool_calls": False}
            if stream:
                chunks = stream_chat(s, body)
                tcs = [t for ch in chunks if ch["choices"] for t in ch["choices"][0]["delta"].get("tool_calls") or []]
                name_, args = tcs[0]["function"]["name"], "".join(t["function"].get("arguments", "") for t in tcs)
                assert all("<tool_call>" not in (ch["choices"][0]["delta"].get("content") or "")
                           for ch in chunks if ch["choices"])
            else:
                c = post(s, "/v1/chat/completions", body).json()["choices"][0]
                assert c["finish_reason"] == "tool_calls", c
                name_, args = c["message"]["tool_calls"][0]["function"]["name"], \
                    c["message"]["tool_calls"][0]["function"]["arguments"]
            check_call(name_, args)
    finally:
        assert s.stop()[0] == 0


def test_lazy_trigger_in_a_conversation(tmp_path):
    """Qwen3's own template (Hermes markup) with tool_choice auto: a conversation whose
    earlier turns called the tool leads the model to write <tool_call> itself; from that
    word on the grammar holds the call to the tool's schema, and the reply comes back as
    a call."""
    if not os.path.exists(QWEN3):
        pytest.skip("SKIPPED: the Qwen3 tokenizer_config.json is not in ../shared/data")
    tmpl = json.load(open(QWEN3))["chat_template"]
    s = Server(["--chat-template-file", template(tmp_path, "qwen3.jinja", tmpl), "--temp", "0", "-c", "4096",
                "--reasoning", "off"])
    try:
        conv = []
        for i, city in enumerate(["Paris", "Rome", "Oslo", "Lima"]):
            conv += [{"role": "user", "content": f"What is the weather in {city} for {i + 2} days?"},
                     {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
                         "name": "get_weather", "arguments": json.dumps({"location": city, "days": i + 2})}}]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": "Sunny"},
                     {"role": "assistant", "content": f"It is sunny in {city}."}]
        conv.append({"role": "user", "content": "What is the weather in Tokyo for 5 days?"})
        for parallel in (True, False):
            d = post(s, "/v1/chat/completions", {"messages": conv, "tools": TOOLS, "max_tokens": 60,
                                                 "parallel_tool_calls": parallel}).json()
            m = d["choices"][0]["message"]
            assert m.get("tool_calls"), d
            for tc in m["tool_calls"]:
                check_call(tc["function"]["name"], tc["function"]["arguments"])
            assert "<tool_call>" not in (m["content"] or "") and "</tool" not in (m["content"] or ""), m
        # one call only: the grammar ends the reply after it
        assert len(m["tool_calls"]) == 1 and d["choices"][0]["finish_reason"] == "tool_calls", d
        assert m["tool_calls"][0]["function"]["name"] == "get_weather"
        assert json.loads(m["tool_calls"][0]["function"]["arguments"])["location"] == "Tokyo"
        # streamed: the content never shows the markup, the call arrives as deltas
        chunks = stream_chat(s, {"messages": conv, "tools": TOOLS, "max_tokens": 60, "parallel_tool_calls": False})
        deltas = [ch["choices"][0]["delta"] for ch in chunks if ch["choices"]]
        assert "".join(d.get("content") or "" for d in deltas) == ""
        args = "".join(t["function"].get("arguments", "") for d in deltas for t in d.get("tool_calls") or [])
        assert args == m["tool_calls"][0]["function"]["arguments"]
    finally:
        assert s.stop()[0] == 0


def test_call_after_a_thought(tmp_path):
    """A template whose prompt opens a thought (<think> at its end): with required, the
    grammar lets the reply end its thought, then holds the call. The reply's text starts
    with </think>; the call still reads, and the tag never reaches the content (OpenAI,
    Anthropic, streamed or not)."""
    t = template(tmp_path, "think.jinja", "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                 "{% if tools %}<tool_call>{% endif %}assistant: <think>\n")
    s = Server(["--chat-template-file", t, "--temp", "0", "-c", "4096"])
    try:
        toks = post(s, "/tokenize", {"content": "</think>"}).json()["tokens"]
        # the closing tag made likely, so that this small model ends its thought at once
        body = {"messages": ASK, "tools": TOOLS, "max_tokens": 100, "tool_choice": "required",
                "parallel_tool_calls": False, "verbose": True, "logit_bias": [[t, 4] for t in toks[:2]]}
        d = post(s, "/v1/chat/completions", body).json()
        c = d["choices"][0]
        assert d["__verbose"]["content"].startswith("</think>"), d["__verbose"]
        assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None, c
        check_call(c["message"]["tool_calls"][0]["function"]["name"], c["message"]["tool_calls"][0]["function"]["arguments"])
        chunks = stream_chat(s, body)
        text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"])
        assert "think>" not in text
        r = post(s, "/v1/messages", {"model": "m", "max_tokens": 100, "messages": ASK, "logit_bias": body["logit_bias"],
                                     "tools": [{"name": x["function"]["name"], "input_schema": x["function"]["parameters"]}
                                               for x in TOOLS], "tool_choice": {"type": "any", "disable_parallel_tool_use": True}}).json()
        assert r["stop_reason"] == "tool_use" and r["content"][-1]["type"] == "tool_use", r
        assert all("think>" not in (b.get("text") or "") for b in r["content"])
    finally:
        assert s.stop()[0] == 0
