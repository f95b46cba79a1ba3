/* llama-server's built-in chat template names (--chat-template chatml, llama3, ...): each
 * known format written here as a small Jinja template, rendered like any other. A name we
 * have no text for is refused at start-up rather than taken as a literal template. */
#include <string.h>

#include "core/common.h"
#include "server/server.h"

/* Turns of the form <open role> content <close>, with the generation prompt opening an
 * assistant turn. ROLE_MAP renames roles first (a Jinja expression over `role`). */
#define TURNS(open, close, gen)                                                                            \
    "{%- for m in messages -%}{{- " open " ~ (m['content'] if m['content'] is string else '') ~ " close " -}}" \
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- " gen " -}}{%- endif -%}"

static const struct {
    const char *name;
    const char *src;
} k_named[] = {
    {"chatml", TURNS("'<|im_start|>' ~ m['role'] ~ '\\n'", "'<|im_end|>\\n'", "'<|im_start|>assistant\\n'")},
    {"llama3", TURNS("'<|start_header_id|>' ~ m['role'] ~ '<|end_header_id|>\\n\\n'", "'<|eot_id|>'",
                     "'<|start_header_id|>assistant<|end_header_id|>\\n\\n'")},
    {"llama4", TURNS("'<|header_start|>' ~ m['role'] ~ '<|header_end|>\\n\\n'", "'<|eot|>'",
                     "'<|header_start|>assistant<|header_end|>\\n\\n'")},
    {"command-r",
     TURNS("'<|START_OF_TURN_TOKEN|>' ~ {'system': '<|SYSTEM_TOKEN|>', 'user': '<|USER_TOKEN|>', "
           "'assistant': '<|CHATBOT_TOKEN|>'}.get(m['role'], '<|USER_TOKEN|>')",
           "'<|END_OF_TURN_TOKEN|>'", "'<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>'")},
    {"zephyr", TURNS("'<|' ~ m['role'] ~ '|>\\n'", "'<|endoftext|>\\n'", "'<|assistant|>\\n'")},
    {"phi3", TURNS("'<|' ~ m['role'] ~ '|>\\n'", "'<|end|>\\n'", "'<|assistant|>\\n'")},
    {"phi4", TURNS("'<|im_start|>' ~ m['role'] ~ '<|im_sep|>'", "'<|im_end|>'", "'<|im_start|>assistant<|im_sep|>'")},
    {"falcon3", TURNS("'<|' ~ m['role'] ~ '|>\\n'", "'\\n'", "'<|assistant|>\\n'")},
    {"granite", TURNS("'<|start_of_role|>' ~ m['role'] ~ '<|end_of_role|>'", "'<|end_of_text|>\\n'",
                      "'<|start_of_role|>assistant<|end_of_role|>'")},
    {"megrez", TURNS("'<|role_start|>' ~ m['role'] ~ '<|role_end|>'", "'<|turn_end|>'",
                     "'<|role_start|>assistant<|role_end|>'")},
    {"exaone3", TURNS("'[|' ~ m['role'] ~ '|]'", "'[|endofturn|]\\n'", "'[|assistant|]'")},
    {"openchat",
     TURNS("('' if m['role'] == 'system' else 'GPT4 Correct ' ~ ('Assistant' if m['role'] == 'assistant' else 'User') ~ ': ')",
           "'<|end_of_turn|>'", "'GPT4 Correct Assistant:'")},
    {"vicuna",
     TURNS("{'system': '', 'assistant': 'ASSISTANT: '}.get(m['role'], 'USER: ')",
           "('</s>\\n' if m['role'] == 'assistant' else '\\n')", "'ASSISTANT:'")},
    {"vicuna-orca",
     TURNS("{'system': '### System:\\n', 'assistant': '### Assistant:\\n'}.get(m['role'], '### User:\\n')",
           "('</s>\\n' if m['role'] == 'assistant' else '\\n')", "'### Assistant:\\n'")},
    {"deepseek",
     TURNS("{'system': '', 'assistant': '### Response:\\n'}.get(m['role'], '### Instruction:\\n')",
           "('\\n<|EOT|>\\n' if m['role'] == 'assistant' else '\\n')", "'### Response:\\n'")},
    {"deepseek2",
     TURNS("{'system': '', 'assistant': 'Assistant: '}.get(m['role'], 'User: ')",
           "{'system': '\\n\\n', 'assistant': '<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>'}.get(m['role'], '\\n\\n')",
           "'Assistant:'")},
    {"deepseek3",
     TURNS("{'system': '', 'assistant': '<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>'}.get(m['role'], '<\xef\xbd\x9c" "User\xef\xbd\x9c>')",
           "('<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>' if m['role'] == 'assistant' else '')",
           "'<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>'")},
    {"mistral-v7",
     TURNS("{'system': '[SYSTEM_PROMPT] ', 'assistant': ' '}.get(m['role'], '[INST] ')",
           "{'system': '[/SYSTEM_PROMPT]', 'assistant': '</s>'}.get(m['role'], '[/INST]')", "''")},
    /* a system message goes before the first user turn, inside it */
    {"gemma",
     "{%- set ns = namespace(sys='') -%}"
     "{%- for m in messages -%}"
     "{%- set c = m['content'] if m['content'] is string else '' -%}"
     "{%- if m['role'] == 'system' -%}{%- set ns.sys = ns.sys ~ c ~ '\\n\\n' -%}"
     "{%- else -%}{{- '<start_of_turn>' ~ ('model' if m['role'] == 'assistant' else 'user') ~ '\\n' ~ ns.sys ~ c | trim ~ "
     "'<end_of_turn>\\n' -}}{%- set ns.sys = '' -%}{%- endif -%}"
     "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"},
    {"mistral-v3",
     "{%- set ns = namespace(sys='') -%}"
     "{%- for m in messages -%}"
     "{%- set c = m['content'] if m['content'] is string else '' -%}"
     "{%- if m['role'] == 'system' -%}{%- set ns.sys = ns.sys ~ c ~ '\\n\\n' -%}"
     "{%- elif m['role'] == 'assistant' -%}{{- ' ' ~ c ~ '</s>' -}}"
     "{%- else -%}{{- '[INST] ' ~ ns.sys ~ c ~ '[/INST]' -}}{%- set ns.sys = '' -%}{%- endif -%}"
     "{%- endfor -%}"},
    {"llama2",
     "{%- set ns = namespace(sys='') -%}"
     "{%- for m in messages -%}"
     "{%- set c = m['content'] if m['content'] is string else '' -%}"
     "{%- if m['role'] == 'system' -%}{%- set ns.sys = '<<SYS>>\\n' ~ c ~ '\\n<</SYS>>\\n\\n' -%}"
     "{%- elif m['role'] == 'assistant' -%}{{- ' ' ~ c ~ '</s>' -}}"
     "{%- else -%}{{- '[INST] ' ~ ns.sys ~ c ~ ' [/INST]' -}}{%- set ns.sys = '' -%}{%- endif -%}"
     "{%- endfor -%}"},
};

/* Every name llama-server's --chat-template accepts (its README), so that one we lack is
 * an error and not a literal template. */
static const char *const k_llama_names[] = {
    "bailing", "bailing-think", "bailing2", "chatglm3", "chatglm4", "chatml", "command-r", "deepseek",
    "deepseek-ocr", "deepseek2", "deepseek3", "exaone-moe", "exaone3", "exaone4", "falcon3", "gemma",
    "gigachat", "glmedge", "gpt-oss", "granite", "granite-4.0", "granite-4.1", "grok-2", "hunyuan-dense",
    "hunyuan-moe", "hunyuan-vl", "kimi-k2", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip",
    "llama3", "llama4", "megrez", "minicpm", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7",
    "mistral-v7-tekken", "monarch", "openchat", "orion", "pangu-embedded", "phi3", "phi4", "rwkv-world",
    "seed_oss", "smolvlm", "solar-open", "vicuna", "vicuna-orca", "yandex", "zephyr",
};

const char *ob_srv_named_template(const char *name, bool *known) {
    *known = false;
    for (size_t i = 0; i < OB_ARRAY_LEN(k_named); i++)
        if (!strcmp(name, k_named[i].name)) {
            *known = true;
            return k_named[i].src;
        }
    for (size_t i = 0; i < OB_ARRAY_LEN(k_llama_names); i++)
        if (!strcmp(name, k_llama_names[i])) *known = true;
    return NULL;
}
