/* A line editor for the terminal chat: reads one line of any length from a terminal in
 * raw mode (the kernel's canonical mode cuts a line at 4,096 bytes), with cursor keys,
 * the usual Emacs keys (Ctrl-A/E/B/F/K/U/W/L), history (up/down, Ctrl-P/N) and bracketed
 * paste, so a pasted text with newlines is one line. The screen shows one row that
 * scrolls sideways around the cursor. The terminal is in raw mode only inside
 * ob_line_read; Ctrl-C there is a key, not a signal. */
#ifndef OB_APP_LINE_EDIT_H
#define OB_APP_LINE_EDIT_H
#include <stddef.h>

typedef struct ob_line_edit {
    int in_fd, out_fd;       /* a terminal each */
    char **hist;             /* [n_hist] earlier lines, oldest first (owned) */
    int n_hist;
    unsigned char pend[4096];  /* bytes read but not yet taken: what follows an Enter */
    int n_pend, pend_off;
    int skip_lf;             /* the last line ended with CR: a LF right after it is its pair */
} ob_line_edit;

typedef enum ob_line_result {
    OB_LINE_OK,              /* *line is the line, without its newline */
    OB_LINE_EOF,             /* Ctrl-D on an empty line, or the input ended */
    OB_LINE_INTR,            /* Ctrl-C; *line is what had been typed (discarded on screen) */
    OB_LINE_ERROR,           /* the terminal failed or out of memory */
} ob_line_result;

/* Whether fd in and out are terminals the editor can drive (not TERM=dumb). */
int ob_line_edit_usable(int in_fd, int out_fd);
void ob_line_edit_init(ob_line_edit *e, int in_fd, int out_fd);
void ob_line_edit_free(ob_line_edit *e);
/* Shows prompt and reads a line; *line is malloc'd (NULL with OB_LINE_EOF/ERROR). */
ob_line_result ob_line_read(ob_line_edit *e, const char *prompt, char **line);
/* Adds a line to the history (most recent last; at most 200 kept). */
void ob_line_history_add(ob_line_edit *e, const char *line);

#endif
