/* The 1bit command: dispatches to one subcommand per file. Invoked as `llama-server`
 * (a symlink) or with llama-server flags and no subcommand, it serves. */
#include "app/commands.h"
#include "onebit.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: 1bit <command> [options]\n\n"
            "commands:\n"
            "  run         generate text or chat in the terminal\n"
            "  serve       HTTP server (OpenAI, llama-server, Anthropic, Lemonade APIs)\n"
            "  bench       measure prefill and decode speed (llama-bench style rows)\n"
            "  census      run every model in every serving mode, one row each\n"
            "  perplexity  perplexity of a model on a text file\n"
            "  synth       write a random-weight model of a known shape\n"
            "  tokenize    print the token ids of a text\n"
            "  template    render a chat template\n"
            "  info        show the model and the devices\n"
            "  quantize    rewrite a model's weight matrices in another type\n"
            "  convert     Hugging Face folder -> GGUF\n"
            "  rag         index a folder of text and answer questions from it\n"
            "  pull        download a GGUF model from the Hugging Face Hub into its cache\n\n"
            "Run `1bit <command> --help` for a command's options.\n");
}

typedef struct { const char *name; int (*fn)(int, char **); } ob_command;

static const ob_command g_commands[] = {
    {"run", ob_cmd_run},           {"serve", ob_cmd_serve},   {"bench", ob_cmd_bench},
    {"perplexity", ob_cmd_perplexity}, {"synth", ob_cmd_synth}, {"tokenize", ob_cmd_tokenize},
    {"template", ob_cmd_template}, {"info", ob_cmd_info},       {"quantize", ob_cmd_quantize},
    {"convert", ob_cmd_convert},   {"rag", ob_cmd_rag},       {"pull", ob_cmd_pull},
    {"census", ob_cmd_census},
};

/* A command's exit. After a device fault the driver's teardown at exit may wait on work
 * that never ends (a hung shader), so the process leaves without it. */
static int finish(int rc) {
    if (!ob_device_faulted()) return rc;
    fflush(stdout);
    fflush(stderr);
    _exit(rc ? rc : 1);
}

int main(int argc, char **argv) {
    const char *prog = strrchr(argv[0], '/');
    prog = prog ? prog + 1 : argv[0];
    if (!strcmp(prog, "llama-server")) return finish(ob_cmd_serve(argc, argv));
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    /* llama-server flags with no subcommand (how Lemonade launches a server binary). */
    if (argv[1][0] == '-') return finish(ob_cmd_serve(argc, argv));
    for (size_t i = 0; i < sizeof(g_commands) / sizeof(g_commands[0]); i++)
        if (!strcmp(argv[1], g_commands[i].name)) return finish(g_commands[i].fn(argc - 1, argv + 1));
    fprintf(stderr, "1bit: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
