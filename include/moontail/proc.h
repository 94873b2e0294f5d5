/* proc.h - processes and stop requests where POSIX and Windows differ: a
 * shell command run as a child whose whole tree ends with it (the tunnel), a
 * program started to run on after this one (setup's background node) or
 * waited for (systemctl, schtasks), other processes by id, this program's
 * path, the stop requests a daemon waits for (signals on POSIX; Ctrl-C,
 * closing the console, logoff, shutdown and a named event on Windows), a
 * one-shot Ctrl-C for a generation, and a thread's priority. proc_posix.c
 * and proc_win32.c. */
#ifndef MOONTAIL_PROC_H
#define MOONTAIL_PROC_H

#include "moontail/sock.h"

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct mt_proc mt_proc;

/* Runs command with the system's shell (/bin/sh -c; on Windows %COMSPEC% /d
 * /s /c, so the command is cmd.exe syntax) as a child in a group of its own
 * that ends when this process does: stdin is empty, stdout and stderr go to
 * a pipe read with mt_proc_read and waited on through mt_proc_output. No
 * descriptor or socket of this process is passed on. NULL with errno. */
mt_proc *mt_proc_shell(const char *command);
/* Starts argv[0] (a path) with argv to run on after this process ends (its
 * own session; stdin empty, stdout and stderr appended to log). NULL with
 * errno. */
mt_proc *mt_proc_detach(char *const argv[], const char *log);
/* Runs argv[0] (looked up in PATH) with argv and waits for it: its exit code,
 * or -1 when it could not run or was killed. quiet: its output is dropped. */
int mt_proc_run(char *const argv[], bool quiet);
/* Once, first thing in main: on Windows, argv again from the UTF-16 command
 * line as UTF-8 (the C runtime's argv is in the ANSI code page, which loses
 * what it cannot spell) and the console's code pages set to UTF-8; nothing
 * on POSIX, where argv is already the bytes given. */
void mt_proc_args_utf8(int *argc, char ***argv);
/* The process id. */
int mt_proc_id(const mt_proc *p);
/* What mt_poll waits on (MT_POLLIN) for the shell child's output. */
mt_sock mt_proc_output(const mt_proc *p);
/* Reads its output: > 0 bytes, 0 at the end, -1 with errno (EAGAIN: none yet). */
ssize_t mt_proc_read(mt_proc *p, void *buf, size_t n);
/* Whether the child has exited (then *status is for mt_proc_describe). */
bool mt_proc_exited(mt_proc *p, int *status);
/* Asks what is left of the child's group to end (after the child exited). */
void mt_proc_end_group(mt_proc *p);
/* Ends the child and its group: asked, then after 3 s forced (Windows: at
 * once); *status as mt_proc_exited's. */
void mt_proc_stop(mt_proc *p, int *status);
/* "exit status N", or "signal N (NAME)" on POSIX. */
void mt_proc_describe(int status, char *out, size_t size);
/* Frees p: a shell child's group is killed, a detached process runs on. */
void mt_proc_free(mt_proc *p);

/* Whether a process of that id runs. */
bool mt_pid_alive(int pid);
/* Asks process pid to stop (SIGTERM; on Windows the stop event of a
 * MoonTail process that waits in mt_stop_wait, else TerminateProcess) and
 * waits up to wait_ms for it to end: 0 (ended or not there), -1 with errno. */
int mt_pid_stop(int pid, int wait_ms);
/* This program's own path: 0, or -1. */
int mt_self_exe(char *out, size_t cap);

/* Why mt_stop_wait returned. */
typedef enum mt_stop_why {
    MT_STOP_NONE,      /* the timeout */
    MT_STOP_INTERRUPT, /* SIGINT, Ctrl-C, Ctrl-Break */
    MT_STOP_TERMINATE, /* SIGTERM; the console closed, logoff, shutdown, setup --stop */
    MT_STOP_RELOAD,    /* SIGHUP (POSIX only): reopen the log, reread the certificate */
} mt_stop_why;

/* Before any thread starts: from now on stop requests (and SIGHUP when
 * reload) wait for mt_stop_wait instead of ending the process; SIGPIPE is
 * ignored. */
void mt_stop_catch(bool reload);
/* Waits up to timeout_ms (< 0: forever) for a stop request. */
mt_stop_why mt_stop_wait(int timeout_ms);
/* "SIGINT", "SIGTERM", "SIGHUP" / "Ctrl-C", "a stop request". */
const char *mt_stop_name(mt_stop_why why);
/* The process has stopped cleanly: on Windows, a console-close or shutdown
 * request (which ends the process once it is answered) is answered now. */
void mt_stop_done(void);

/* Until mt_interrupt_release: the first Ctrl-C sets *flag to 1, the next one
 * ends the process as usual. */
void mt_interrupt_catch(volatile sig_atomic_t *flag);
void mt_interrupt_release(void);

/* The calling thread at the lowest priority (background work). */
void mt_thread_background(void);
/* Stops this process where it stands (a test hook: SIGSTOP; on Windows every
 * other thread is suspended and this one sleeps). */
void mt_test_freeze(void);

#endif
