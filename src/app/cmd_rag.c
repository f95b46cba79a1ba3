/* 1bit rag: not written yet. */
#include <stdio.h>
#include "app/commands.h"

int ob_cmd_rag(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "rag: not implemented yet\n");
    return 2;
}
