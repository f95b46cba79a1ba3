/* Child processes for the agent features (exec_shell_command, git ls-files, MCP servers).
 *
 * posix_spawn, not fork: the server is multithreaded, and glibc's posix_spawn reports a
 * failed exec (a missing command) as an error here. Each child leads a process group of
 * its own, so killing the group also ends what it started (a shell's pipeline, an MCP
 * server's helpers), and starts with default signal handling and an empty mask: the
 * server blocks SIGINT/SIGTERM in every thread and ignores SIGPIPE, and a child would
 * inherit both. */
#include "server/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/common.h"

extern char **environ;

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

ob_status ob_subproc_spawn(ob_subproc *p, char *const argv[], char *const envp[], const char *cwd, int flags,
                           char *err, size_t err_len) {
    p->pid = -1;
    p->in = p->out = -1;
    p->status = 0;
    if (cwd) {
        /* checked here: a bad directory would otherwise read as a missing command */
        struct stat sb;
        if (stat(cwd, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return ob_fail(err, err_len, OB_ERR_ARG, "working directory '%s' is not a directory", cwd);
    }
    int inp[2] = {-1, -1}, outp[2] = {-1, -1};
    if (pipe2(outp, O_CLOEXEC) != 0 || ((flags & OB_SUBPROC_STDIN) && pipe2(inp, O_CLOEXEC) != 0)) {
        int e = errno;
        close_fd(&outp[0]);
        close_fd(&outp[1]);
        return ob_fail(err, err_len, OB_ERR_IO, "pipe: %s", strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    if (flags & OB_SUBPROC_STDIN) posix_spawn_file_actions_adddup2(&fa, inp[0], 0);
    else posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, outp[1], 1);
    if (flags & OB_SUBPROC_MERGE_ERR) posix_spawn_file_actions_adddup2(&fa, outp[1], 2);
    if (cwd) posix_spawn_file_actions_addchdir_np(&fa, cwd);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
    posix_spawn_file_actions_addclosefrom_np(&fa, 3); /* no listening socket or client connection leaks in */
#endif
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    static const int sigs[] = {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2};
    for (size_t i = 0; i < OB_ARRAY_LEN(sigs); i++) sigaddset(&dfl, sigs[i]);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, envp ? envp : environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close_fd(&outp[1]);
    close_fd(&inp[0]);
    if (rc != 0) {
        close_fd(&outp[0]);
        close_fd(&inp[1]);
        return ob_fail(err, err_len, OB_ERR_IO, "cannot run '%s': %s", argv[0], strerror(rc));
    }
    fcntl(outp[0], F_SETFL, fcntl(outp[0], F_GETFL) | O_NONBLOCK);
    if (inp[1] >= 0) fcntl(inp[1], F_SETFL, fcntl(inp[1], F_GETFL) | O_NONBLOCK);
    p->pid = pid;
    p->in = inp[1];
    p->out = outp[0];
    return OB_OK;
}

bool ob_subproc_exited(const ob_subproc *p) {
    if (p->pid <= 0) return true;
    /* WNOWAIT: the zombie keeps the pid (and so the group id) from being reused until
     * ob_subproc_kill has signalled the group */
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) return errno == ECHILD;
    return si.si_pid == p->pid;
}

void ob_subproc_kill(ob_subproc *p) {
    close_fd(&p->in);
    close_fd(&p->out);
    if (p->pid <= 0) return;
    kill(-p->pid, SIGKILL);
    kill(p->pid, SIGKILL); /* if it left its group */
    while (waitpid(p->pid, &p->status, 0) < 0 && errno == EINTR) {}
    p->pid = -1;
}

int ob_subproc_code(const ob_subproc *p) {
    if (WIFEXITED(p->status)) return WEXITSTATUS(p->status);
    if (WIFSIGNALED(p->status)) return 128 + WTERMSIG(p->status);
    return -1;
}

ob_status ob_subproc_run(char *const argv[], const char *cwd, size_t max_out, int timeout_ms,
                         const volatile int *stop, ob_subproc_result *res, char *err, size_t err_len) {
    memset(res, 0, sizeof *res);
    ob_subproc p;
    ob_status st = ob_subproc_spawn(&p, argv, NULL, cwd, OB_SUBPROC_MERGE_ERR, err, err_len);
    if (st != OB_OK) return st;
    res->out = malloc(max_out + 1);
    if (!res->out) {
        ob_subproc_kill(&p);
        return ob_fail(err, err_len, OB_ERR_NOMEM, "out of memory");
    }
    double deadline = ob_time_s() + timeout_ms / 1e3;
    double quiet_until = 0; /* after the child exits: read what is left, briefly */
    char buf[4096];
    for (;;) {
        if (stop && *stop) {
            res->stopped = true;
            break;
        }
        double now = ob_time_s();
        if (now >= deadline) {
            res->timed_out = true;
            break;
        }
        if (quiet_until == 0 && ob_subproc_exited(&p)) quiet_until = now + 0.2;
        /* the child is gone but something it started still holds the pipe */
        if (quiet_until > 0 && now >= quiet_until) break;
        struct pollfd pf = {.fd = p.out, .events = POLLIN};
        int pr = poll(&pf, 1, 50);
        if (pr < 0 && errno != EINTR) break;
        if (pr <= 0) continue;
        ssize_t n = read(p.out, buf, sizeof buf);
        if (n == 0) break; /* EOF: every writer closed it */
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN) continue;
            break;
        }
        size_t keep = OB_MIN((size_t)n, max_out - res->len);
        memcpy(res->out + res->len, buf, keep);
        res->len += keep;
        if (keep < (size_t)n) res->truncated = true; /* keep draining so the child never blocks */
    }
    if (!res->timed_out && !res->stopped) {
        /* EOF: wait for the exit itself within the time left */
        while (!ob_subproc_exited(&p) && ob_time_s() < deadline && !(stop && *stop)) {
            struct timespec ts = {0, 10 * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (!ob_subproc_exited(&p)) {
            if (stop && *stop) res->stopped = true;
            else res->timed_out = true;
        }
    }
    ob_subproc_kill(&p);
    res->out[res->len] = 0;
    res->code = ob_subproc_code(&p);
    return OB_OK;
}
