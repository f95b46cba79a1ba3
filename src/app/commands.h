/* Subcommands of the 1bit binary: one file per subcommand (cmd_<name>.c). Each returns
 * the process exit code; main.c dispatches. */
#ifndef OB_APP_COMMANDS_H
#define OB_APP_COMMANDS_H

#include <stddef.h>

int ob_cmd_run(int argc, char **argv);
int ob_cmd_bench(int argc, char **argv);
int ob_cmd_census(int argc, char **argv);
int ob_cmd_synth(int argc, char **argv);
int ob_cmd_perplexity(int argc, char **argv);
int ob_cmd_tokenize(int argc, char **argv);
int ob_cmd_template(int argc, char **argv);
int ob_cmd_serve(int argc, char **argv);
int ob_cmd_info(int argc, char **argv);
int ob_cmd_quantize(int argc, char **argv);
int ob_cmd_convert(int argc, char **argv);
int ob_cmd_rag(int argc, char **argv);
int ob_cmd_pull(int argc, char **argv);

/* Path of the default model (Gemma 3 270M from the PyPI package), or NULL with a message
 * in err. The returned string is malloc'd. */
char *ob_default_model_path(char *err, size_t err_len);

#endif
