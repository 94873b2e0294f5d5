/* proc_posix.c - proc.h on POSIX (Linux first: the tunnel's child gets
 * PR_SET_PDEATHSIG, thread priority goes by thread id). */
#include "moontail/proc.h"
#include "moontail/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#include <sys/syscall.h>
#endif

extern char **environ;

struct mt_proc {
    pid_t pid;
    int out;     /* the shell child's output pipe, or -1 */
    bool group;  /* a group of its own: killed as one */
    bool reaped; /* waited for: the id may be reused, no signal goes to it */
    int status;
};

mt_proc *mt_proc_shell(const char *command) {
    mt_proc *p = calloc(1, sizeof *p);
    int fds[2];
    if (!p) return NULL;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        free(p);
        return NULL;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        free(p);
        errno = e;
        return NULL;
    }
    if (pid == 0) { /* only async-signal-safe calls until exec */
        setpgid(0, 0);
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* this process died without stopping the child */
#endif
        if (getppid() != parent) _exit(1);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL); /* a daemon blocks SIGINT/SIGTERM in its threads */
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigaction(SIGPIPE, &dfl, NULL);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close_range(3, ~0U, 0); /* no socket of this process leaks into the child */
        execl("/bin/sh", "sh", "-c", command, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid); /* also here, so a kill right after fork reaches the group */
    close(fds[1]);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    p->pid = pid;
    p->out = fds[0];
    p->group = true;
    return p;
}

mt_proc *mt_proc_detach(char *const argv[], const char *log) {
    mt_proc *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID); /* outlives this terminal */
    int rc = posix_spawn(&p->pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
        free(p);
        errno = rc;
        return NULL;
    }
    p->out = -1;
    return p;
}

int mt_proc_run(char *const argv[], bool quiet) {
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (quiet) {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    }
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    int st = 0;
    if (rc != 0) return -1;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void mt_proc_args_utf8(int *argc, char ***argv) {
    (void)argc, (void)argv;
}

int mt_proc_id(const mt_proc *p) {
    return (int)p->pid;
}

mt_sock mt_proc_output(const mt_proc *p) {
    return p->out;
}

ssize_t mt_proc_read(mt_proc *p, void *buf, size_t n) {
    return read(p->out, buf, n);
}

bool mt_proc_exited(mt_proc *p, int *status) {
    if (!p->reaped && waitpid(p->pid, &p->status, WNOHANG) == p->pid) p->reaped = true;
    if (p->reaped) *status = p->status;
    return p->reaped;
}

void mt_proc_end_group(mt_proc *p) {
    if (p->group) kill(-p->pid, SIGTERM);
}

/* Waits for the child (already signalled) up to ms; true when reaped. */
static bool reap(mt_proc *p, int ms) {
    int64_t until = mt_mono_ms() + ms;
    for (;;) {
        pid_t r = p->reaped ? p->pid : waitpid(p->pid, &p->status, WNOHANG);
        if (r == p->pid || (r < 0 && errno == ECHILD)) {
            p->reaped = true;
            return true;
        }
        if (mt_mono_ms() >= until) return false;
        mt_sleep_ms(20);
    }
}

void mt_proc_stop(mt_proc *p, int *status) {
    pid_t target = p->group ? -p->pid : p->pid;
    kill(target, SIGTERM);
    if (!reap(p, 3000)) {
        kill(target, SIGKILL);
        reap(p, 3000);
    }
    if (p->group) kill(-p->pid, SIGKILL); /* whatever else of the group is left */
    *status = p->status;
}

void mt_proc_describe(int status, char *out, size_t size) {
    if (WIFEXITED(status))
        snprintf(out, size, "exit status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, size, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(out, size, "status %d", status);
}

void mt_proc_free(mt_proc *p) {
    if (!p) return;
    if (p->group) kill(-p->pid, SIGKILL); /* nothing of this run outlives it */
    if (p->out >= 0) close(p->out);
    if (p->group && !p->reaped) waitpid(p->pid, &p->status, 0);
    free(p);
}

bool mt_pid_alive(int pid) {
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

int mt_pid_stop(int pid, int wait_ms) {
    if (kill((pid_t)pid, SIGTERM) != 0) return errno == ESRCH ? 0 : -1;
    for (int64_t until = mt_mono_ms() + wait_ms; mt_mono_ms() < until && mt_pid_alive(pid);)
        mt_sleep_ms(50);
    return 0;
}

int mt_self_exe(char *out, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0 || (size_t)n >= cap - 1) return -1;
    out[n] = '\0';
    return 0;
}

static sigset_t stop_sigs;

void mt_stop_catch(bool reload) {
    sigemptyset(&stop_sigs);
    sigaddset(&stop_sigs, SIGINT);
    sigaddset(&stop_sigs, SIGTERM);
    if (reload) sigaddset(&stop_sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop_sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
}

mt_stop_why mt_stop_wait(int timeout_ms) {
    for (;;) {
        int sig;
        if (timeout_ms < 0) {
            if (sigwait(&stop_sigs, &sig) != 0) continue;
        } else {
            struct timespec ts = {.tv_sec = timeout_ms / 1000,
                                  .tv_nsec = (long)(timeout_ms % 1000) * 1000000L};
            sig = sigtimedwait(&stop_sigs, NULL, &ts);
            if (sig < 0 && errno == EINTR) continue;
            if (sig < 0) return MT_STOP_NONE;
        }
        return sig == SIGINT   ? MT_STOP_INTERRUPT
               : sig == SIGHUP ? MT_STOP_RELOAD
                               : MT_STOP_TERMINATE;
    }
}

const char *mt_stop_name(mt_stop_why why) {
    return why == MT_STOP_INTERRUPT   ? "SIGINT"
           : why == MT_STOP_TERMINATE ? "SIGTERM"
           : why == MT_STOP_RELOAD    ? "SIGHUP"
                                      : "no stop request";
}

void mt_stop_done(void) {}

static volatile sig_atomic_t *interrupt_flag;
static struct sigaction interrupt_old;

static void on_interrupt(int sig) {
    (void)sig;
    if (interrupt_flag) *interrupt_flag = 1;
}

void mt_interrupt_catch(volatile sig_atomic_t *flag) {
    interrupt_flag = flag;
    *flag = 0;
    struct sigaction sa = {0};
    sa.sa_handler = on_interrupt;
    sa.sa_flags = (int)(SA_RESETHAND | SA_RESTART); /* a second Ctrl-C ends the process */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &interrupt_old);
}

void mt_interrupt_release(void) {
    sigaction(SIGINT, &interrupt_old, NULL);
    interrupt_flag = NULL;
}

void mt_thread_background(void) {
#ifdef __linux__
    /* nice applies to a thread on Linux, and threads it starts inherit it */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19) != 0) {
        /* not fatal: the caller's rate limits still bound the work */
    }
#endif
}

void mt_test_freeze(void) {
    raise(SIGSTOP);
}
