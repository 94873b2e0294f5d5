/* proc_win32.c - proc.h on Windows. A shell child runs in a job object that
 * kills the whole tree when it is closed (also when this process dies, which
 * closes it), with only the NUL device and its output pipe inherited; a pump
 * thread copies the pipe into a loopback socket pair so that mt_poll can wait
 * on it. Stop requests come from the console (Ctrl-C, Ctrl-Break, closing the
 * window, logoff, shutdown) and from a named event, Local\MoonTail-stop-PID,
 * that `moontail setup --stop` sets; there is no SIGHUP, so no reload. */
#include "moontail/proc.h"
#include "text_win32.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

#include <shellapi.h>
#include <tlhelp32.h>

struct mt_proc {
    HANDLE process, job; /* job: NULL for a detached process */
    DWORD pid;
    HANDLE out_pipe; /* the read end the pump reads */
    mt_wake out;     /* rd: what mt_poll waits on; wr: where the pump writes */
    pthread_t pump;
    bool pumping, exited;
    int status;
};

static int win_errno(DWORD e) {
    switch (e) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
        return ENOENT;
    case ERROR_ACCESS_DENIED:
        return EACCES;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
        return ENOMEM;
    case ERROR_INVALID_PARAMETER:
        return EINVAL;
    default:
        return EIO;
    }
}

/* Appends arg to the command line w (cap wide characters) quoted as the C
 * runtime's argument parser reads it back; false when it does not fit. */
static bool append_arg(wchar_t *w, size_t cap, size_t *len, const char *arg) {
    wchar_t *a = win32_wide(arg);
    if (!a) return false;
    bool plain = a[0] != 0 && !wcspbrk(a, L" \t\n\v\"");
    size_t n = *len;
#define PUT(c)                                                                                     \
    do {                                                                                           \
        if (n + 1 >= cap) {                                                                        \
            free(a);                                                                               \
            return false;                                                                          \
        }                                                                                          \
        w[n++] = (c);                                                                              \
    } while (0)
    if (n) PUT(L' ');
    if (plain) {
        for (const wchar_t *p = a; *p; p++) PUT(*p);
    } else {
        PUT(L'"');
        for (const wchar_t *p = a;; p++) {
            size_t slashes = 0;
            while (*p == L'\\') p++, slashes++;
            if (!*p) { /* before the closing quote: every backslash doubled */
                for (size_t i = 0; i < 2 * slashes; i++) PUT(L'\\');
                break;
            }
            if (*p == L'"') { /* backslashes doubled and the quote escaped */
                for (size_t i = 0; i < 2 * slashes + 1; i++) PUT(L'\\');
                PUT(L'"');
            } else {
                for (size_t i = 0; i < slashes; i++) PUT(L'\\');
                PUT(*p);
            }
        }
        PUT(L'"');
    }
#undef PUT
    w[n] = 0;
    *len = n;
    free(a);
    return true;
}

static wchar_t *command_line(char *const argv[]) {
    size_t cap = 32768, len = 0;
    wchar_t *w = malloc(cap * sizeof *w);
    if (!w) return NULL;
    w[0] = 0;
    for (int i = 0; argv[i]; i++)
        if (!append_arg(w, cap, &len, argv[i])) {
            free(w);
            errno = E2BIG;
            return NULL;
        }
    return w;
}

static HANDLE open_nul(bool write) {
    SECURITY_ATTRIBUTES sa = {.nLength = sizeof sa, .bInheritHandle = TRUE};
    return CreateFileW(L"NUL", write ? GENERIC_WRITE : GENERIC_READ,
                       FILE_SHARE_READ | FILE_SHARE_WRITE, &sa, OPEN_EXISTING, 0, NULL);
}

/* CreateProcessW with exactly the handles in[0..n) inherited (and used as
 * stdin, stdout, stderr). */
static bool start(const wchar_t *app, wchar_t *cmd, HANDLE std_in, HANDLE std_out, HANDLE std_err,
                  DWORD flags, PROCESS_INFORMATION *pi) {
    HANDLE list[3] = {std_in, std_out, std_err};
    int n = 1;
    if (std_out != std_in) list[n++] = std_out;
    if (std_err != std_out && std_err != std_in) list[n++] = std_err;
    SIZE_T size = 0;
    InitializeProcThreadAttributeList(NULL, 1, 0, &size);
    LPPROC_THREAD_ATTRIBUTE_LIST attrs = malloc(size);
    if (!attrs || !InitializeProcThreadAttributeList(attrs, 1, 0, &size)) {
        free(attrs);
        return false;
    }
    bool ok = UpdateProcThreadAttribute(attrs, 0, PROC_THREAD_ATTRIBUTE_HANDLE_LIST, list,
                                        (SIZE_T)n * sizeof list[0], NULL, NULL);
    STARTUPINFOEXW si = {.StartupInfo.cb = sizeof si};
    si.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
    si.StartupInfo.hStdInput = std_in;
    si.StartupInfo.hStdOutput = std_out;
    si.StartupInfo.hStdError = std_err;
    si.lpAttributeList = attrs;
    if (ok)
        ok = CreateProcessW(app, cmd, NULL, NULL, TRUE, flags | EXTENDED_STARTUPINFO_PRESENT, NULL,
                            NULL, &si.StartupInfo, pi);
    DWORD e = GetLastError();
    DeleteProcThreadAttributeList(attrs);
    free(attrs);
    SetLastError(e);
    return ok;
}

static void *pump_main(void *arg) {
    mt_proc *p = arg;
    char buf[4096];
    DWORD got;
    while (ReadFile(p->out_pipe, buf, sizeof buf, &got, NULL) && got > 0) {
        for (DWORD off = 0; off < got;) {
            int w = send((SOCKET)p->out.wr, buf + off, (int)(got - off), 0);
            if (w > 0) {
                off += (DWORD)w;
            } else if (WSAGetLastError() == WSAEWOULDBLOCK) {
                mt_pollfd q = {.fd = p->out.wr, .events = MT_POLLOUT};
                mt_poll(&q, 1, 1000);
            } else {
                return NULL; /* the reader is gone */
            }
        }
    }
    shutdown((SOCKET)p->out.wr, SD_SEND); /* the reader sees the end */
    return NULL;
}

mt_proc *mt_proc_shell(const char *command) {
    mt_proc *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->out = MT_WAKE_NONE;
    wchar_t comspec[MAX_PATH];
    DWORD cn = GetEnvironmentVariableW(L"COMSPEC", comspec, MAX_PATH);
    if (cn == 0 || cn >= MAX_PATH) wcscpy(comspec, L"C:\\Windows\\System32\\cmd.exe");
    wchar_t *wcmd = win32_wide(command);
    size_t cap = (wcmd ? wcslen(wcmd) : 0) + wcslen(comspec) + 32;
    wchar_t *line = malloc(cap * sizeof *line);
    SECURITY_ATTRIBUTES sa = {.nLength = sizeof sa, .bInheritHandle = TRUE};
    HANDLE rd = NULL, wr = NULL, nul = INVALID_HANDLE_VALUE;
    PROCESS_INFORMATION pi = {0};
    int e = 0;
    if (!wcmd || !line) {
        e = wcmd ? ENOMEM : EINVAL;
        goto fail;
    }
    /* cmd.exe takes the rest of its line as the command when it starts with /s /c "..." */
    _snwprintf(line, cap, L"\"%ls\" /d /s /c \"%ls\"", comspec, wcmd);
    line[cap - 1] = 0;
    if (!CreatePipe(&rd, &wr, &sa, 0) || !SetHandleInformation(rd, HANDLE_FLAG_INHERIT, 0) ||
        (nul = open_nul(false)) == INVALID_HANDLE_VALUE || mt_wake_init(&p->out) != 0) {
        e = errno ? errno : win_errno(GetLastError());
        goto fail;
    }
    p->job = CreateJobObjectW(NULL, NULL);
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION lim = {0};
    lim.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    if (!p->job ||
        !SetInformationJobObject(p->job, JobObjectExtendedLimitInformation, &lim, sizeof lim) ||
        !start(comspec, line, nul, wr, wr, CREATE_NO_WINDOW | CREATE_SUSPENDED, &pi)) {
        e = win_errno(GetLastError());
        goto fail;
    }
    if (!AssignProcessToJobObject(p->job, pi.hProcess)) {
        e = win_errno(GetLastError());
        TerminateProcess(pi.hProcess, 1);
        CloseHandle(pi.hThread);
        CloseHandle(pi.hProcess);
        goto fail;
    }
    ResumeThread(pi.hThread);
    CloseHandle(pi.hThread);
    CloseHandle(wr); /* only the child writes now: its exit ends the pipe */
    CloseHandle(nul);
    p->process = pi.hProcess;
    p->pid = pi.dwProcessId;
    p->out_pipe = rd;
    p->pumping = pthread_create(&p->pump, NULL, pump_main, p) == 0;
    free(wcmd);
    free(line);
    if (!p->pumping) {
        mt_proc_free(p); /* kills the child, closes the pipe */
        errno = EAGAIN;
        return NULL;
    }
    return p;
fail:
    if (rd) CloseHandle(rd);
    if (wr) CloseHandle(wr);
    if (nul != INVALID_HANDLE_VALUE) CloseHandle(nul);
    if (p->job) CloseHandle(p->job);
    mt_wake_destroy(&p->out);
    free(p);
    free(wcmd);
    free(line);
    errno = e ? e : EIO;
    return NULL;
}

mt_proc *mt_proc_detach(char *const argv[], const char *log) {
    mt_proc *p = calloc(1, sizeof *p);
    wchar_t *app = win32_wide(argv[0]), *cmd = command_line(argv), *wlog = win32_wide(log);
    SECURITY_ATTRIBUTES sa = {.nLength = sizeof sa, .bInheritHandle = TRUE};
    HANDLE nul = open_nul(false), out = INVALID_HANDLE_VALUE;
    PROCESS_INFORMATION pi = {0};
    bool ok = false;
    if (p && app && cmd && wlog && nul != INVALID_HANDLE_VALUE) {
        out = CreateFileW(wlog, FILE_APPEND_DATA | SYNCHRONIZE, FILE_SHARE_READ | FILE_SHARE_WRITE,
                          &sa, OPEN_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
        const DWORD flags = DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP;
        /* out of a job this process may be in (a scheduled task's), when the job allows it */
        ok = out != INVALID_HANDLE_VALUE &&
             (start(app, cmd, nul, out, out, flags | CREATE_BREAKAWAY_FROM_JOB, &pi) ||
              start(app, cmd, nul, out, out, flags, &pi));
    }
    int e = ok                            ? 0
            : !p || !app || !cmd || !wlog ? (errno ? errno : ENOMEM)
                                          : win_errno(GetLastError());
    if (nul != INVALID_HANDLE_VALUE) CloseHandle(nul);
    if (out != INVALID_HANDLE_VALUE) CloseHandle(out);
    free(app), free(cmd), free(wlog);
    if (!ok) {
        free(p);
        errno = e;
        return NULL;
    }
    CloseHandle(pi.hThread);
    p->process = pi.hProcess;
    p->pid = pi.dwProcessId;
    p->out = MT_WAKE_NONE;
    return p;
}

int mt_proc_run(char *const argv[], bool quiet) {
    wchar_t *cmd = command_line(argv);
    HANDLE nul_in = open_nul(false), nul_out = quiet ? open_nul(true) : INVALID_HANDLE_VALUE;
    HANDLE out = quiet ? nul_out : GetStdHandle(STD_OUTPUT_HANDLE);
    HANDLE err = quiet ? nul_out : GetStdHandle(STD_ERROR_HANDLE);
    PROCESS_INFORMATION pi = {0};
    int code = -1;
    /* NULL application: CreateProcessW looks the first word up in PATH */
    if (cmd && nul_in != INVALID_HANDLE_VALUE && out && out != INVALID_HANDLE_VALUE &&
        start(NULL, cmd, nul_in, out, err, CREATE_NO_WINDOW, &pi)) {
        WaitForSingleObject(pi.hProcess, INFINITE);
        DWORD c;
        if (GetExitCodeProcess(pi.hProcess, &c)) code = (int)c;
        CloseHandle(pi.hThread);
        CloseHandle(pi.hProcess);
    }
    if (nul_in != INVALID_HANDLE_VALUE) CloseHandle(nul_in);
    if (nul_out != INVALID_HANDLE_VALUE) CloseHandle(nul_out);
    free(cmd);
    return code;
}

void mt_proc_args_utf8(int *argc, char ***argv) {
    SetConsoleOutputCP(CP_UTF8);
    SetConsoleCP(CP_UTF8);
    int n = 0;
    wchar_t **w = CommandLineToArgvW(GetCommandLineW(), &n);
    if (!w || n <= 0) return;
    /* kept for the life of the process, as argv is */
    char **out = calloc((size_t)n + 1, sizeof *out);
    for (int i = 0; out && i < n; i++) {
        int len = WideCharToMultiByte(CP_UTF8, 0, w[i], -1, NULL, 0, NULL, NULL);
        if (len <= 0 || !(out[i] = malloc((size_t)len))) { /* keep the C runtime's argv */
            for (int j = 0; j < i; j++) free(out[j]);
            free(out);
            out = NULL;
            break;
        }
        WideCharToMultiByte(CP_UTF8, 0, w[i], -1, out[i], len, NULL, NULL);
    }
    LocalFree(w);
    if (!out) return;
    *argc = n;
    *argv = out;
}

int mt_proc_id(const mt_proc *p) {
    return (int)p->pid;
}

mt_sock mt_proc_output(const mt_proc *p) {
    return mt_wake_sock(&p->out);
}

ssize_t mt_proc_read(mt_proc *p, void *buf, size_t n) {
    return mt_sock_recv(p->out.rd, buf, n);
}

bool mt_proc_exited(mt_proc *p, int *status) {
    if (!p->exited && WaitForSingleObject(p->process, 0) == WAIT_OBJECT_0) {
        DWORD c = 0;
        GetExitCodeProcess(p->process, &c);
        p->status = (int)c;
        p->exited = true;
    }
    if (p->exited) *status = p->status;
    return p->exited;
}

void mt_proc_end_group(mt_proc *p) {
    if (p->job) TerminateJobObject(p->job, 1); /* no gentler way for windowless programs */
}

void mt_proc_stop(mt_proc *p, int *status) {
    if (p->job)
        TerminateJobObject(p->job, 1);
    else
        TerminateProcess(p->process, 1);
    WaitForSingleObject(p->process, 3000);
    if (!mt_proc_exited(p, status)) *status = 1;
}

void mt_proc_describe(int status, char *out, size_t size) {
    if ((unsigned)status >= 0xC0000000u)
        snprintf(out, size, "exit status 0x%08X", (unsigned)status); /* an NTSTATUS: a crash */
    else
        snprintf(out, size, "exit status %d", status);
}

void mt_proc_free(mt_proc *p) {
    if (!p) return;
    if (p->job) {
        TerminateJobObject(p->job, 1);
        CloseHandle(p->job);
    }
    if (p->pumping) {
        mt_sock_shutdown(p->out.wr, MT_SHUT_RDWR); /* a pump blocked on a full socket returns */
        pthread_join(p->pump, NULL);
    }
    if (p->out_pipe) CloseHandle(p->out_pipe);
    mt_wake_destroy(&p->out);
    if (p->process) CloseHandle(p->process);
    free(p);
}

bool mt_pid_alive(int pid) {
    HANDLE h = OpenProcess(SYNCHRONIZE | PROCESS_QUERY_LIMITED_INFORMATION, FALSE, (DWORD)pid);
    if (!h) return GetLastError() == ERROR_ACCESS_DENIED; /* there, but not ours */
    bool alive = WaitForSingleObject(h, 0) == WAIT_TIMEOUT;
    CloseHandle(h);
    return alive;
}

static void stop_event_name(DWORD pid, wchar_t *out, size_t cap) {
    _snwprintf(out, cap, L"Local\\MoonTail-stop-%lu", (unsigned long)pid);
    out[cap - 1] = 0;
}

int mt_pid_stop(int pid, int wait_ms) {
    HANDLE h = OpenProcess(SYNCHRONIZE | PROCESS_TERMINATE, FALSE, (DWORD)pid);
    if (!h) {
        if (GetLastError() == ERROR_INVALID_PARAMETER) return 0; /* no such process */
        errno = win_errno(GetLastError());
        return -1;
    }
    wchar_t name[64];
    stop_event_name((DWORD)pid, name, sizeof name / sizeof name[0]);
    HANDLE ev = OpenEventW(EVENT_MODIFY_STATE, FALSE, name);
    if (ev) {
        SetEvent(ev);
        CloseHandle(ev);
    }
    int rc = 0;
    if (WaitForSingleObject(h, ev ? (DWORD)wait_ms : 0) != WAIT_OBJECT_0) {
        if (!TerminateProcess(h, 1)) {
            errno = win_errno(GetLastError());
            rc = -1;
        } else {
            WaitForSingleObject(h, (DWORD)wait_ms);
        }
    }
    CloseHandle(h);
    return rc;
}

int mt_self_exe(char *out, size_t cap) {
    wchar_t w[32768];
    DWORD n = GetModuleFileNameW(NULL, w, sizeof w / sizeof w[0]);
    if (n == 0 || n >= sizeof w / sizeof w[0]) return -1;
    return win32_utf8(w, out, cap);
}

static HANDLE stop_event, stopped_event;
static volatile LONG stop_why = MT_STOP_NONE;

static BOOL WINAPI on_console(DWORD type) {
    bool final =
        type == CTRL_CLOSE_EVENT || type == CTRL_LOGOFF_EVENT || type == CTRL_SHUTDOWN_EVENT;
    InterlockedCompareExchange(&stop_why, final ? MT_STOP_TERMINATE : MT_STOP_INTERRUPT,
                               MT_STOP_NONE);
    SetEvent(stop_event);
    /* Windows ends the process once this returns from a close, logoff or shutdown: wait
     * for the clean stop first (it allows some 5 s) */
    if (final) WaitForSingleObject(stopped_event, 4500);
    return TRUE;
}

void mt_stop_catch(bool reload) {
    (void)reload; /* no SIGHUP here */
    wchar_t name[64];
    stop_event_name(GetCurrentProcessId(), name, sizeof name / sizeof name[0]);
    if (!stop_event) stop_event = CreateEventW(NULL, TRUE, FALSE, name);
    if (!stopped_event) stopped_event = CreateEventW(NULL, TRUE, FALSE, NULL);
    SetConsoleCtrlHandler(on_console, TRUE);
}

mt_stop_why mt_stop_wait(int timeout_ms) {
    if (!stop_event) {
        Sleep(timeout_ms < 0 ? INFINITE : (DWORD)timeout_ms);
        return MT_STOP_NONE;
    }
    if (WaitForSingleObject(stop_event, timeout_ms < 0 ? INFINITE : (DWORD)timeout_ms) !=
        WAIT_OBJECT_0)
        return MT_STOP_NONE;
    /* the named event (setup --stop) sets no reason */
    InterlockedCompareExchange(&stop_why, MT_STOP_TERMINATE, MT_STOP_NONE);
    return (mt_stop_why)stop_why;
}

const char *mt_stop_name(mt_stop_why why) {
    return why == MT_STOP_INTERRUPT   ? "Ctrl-C"
           : why == MT_STOP_TERMINATE ? "a stop request"
                                      : "no stop request";
}

void mt_stop_done(void) {
    if (stopped_event) SetEvent(stopped_event);
}

static volatile sig_atomic_t *interrupt_flag;
static volatile LONG interrupts;

static BOOL WINAPI on_interrupt(DWORD type) {
    if (type != CTRL_C_EVENT && type != CTRL_BREAK_EVENT) return FALSE;
    if (InterlockedIncrement(&interrupts) > 1) return FALSE; /* the next one: as usual */
    if (interrupt_flag) *interrupt_flag = 1;
    return TRUE;
}

void mt_interrupt_catch(volatile sig_atomic_t *flag) {
    interrupt_flag = flag;
    *flag = 0;
    interrupts = 0;
    SetConsoleCtrlHandler(on_interrupt, TRUE);
}

void mt_interrupt_release(void) {
    SetConsoleCtrlHandler(on_interrupt, FALSE);
    interrupt_flag = NULL;
}

void mt_thread_background(void) {
    SetThreadPriority(GetCurrentThread(), THREAD_PRIORITY_LOWEST);
}

void mt_test_freeze(void) {
    DWORD me = GetCurrentThreadId(), pid = GetCurrentProcessId();
    HANDLE snap = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0);
    THREADENTRY32 te = {.dwSize = sizeof te};
    for (BOOL ok = snap != INVALID_HANDLE_VALUE && Thread32First(snap, &te); ok;
         ok = Thread32Next(snap, &te)) {
        if (te.th32OwnerProcessID != pid || te.th32ThreadID == me) continue;
        HANDLE t = OpenThread(THREAD_SUSPEND_RESUME, FALSE, te.th32ThreadID);
        if (t) SuspendThread(t), CloseHandle(t);
    }
    if (snap != INVALID_HANDLE_VALUE) CloseHandle(snap);
    Sleep(INFINITE);
}
