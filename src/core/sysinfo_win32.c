/* sysinfo_win32.c - sysinfo.h on Windows: Win32 calls for memory,
 * processors, disk and host name, DXGI for the GPU, %LOCALAPPDATA% for the
 * per-user directories. */
#define COBJMACROS
#include "moontail/sysinfo.h"
#include "text_win32.h"
#include "moontail/proc.h"

#include <dxgi.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>

int64_t mt_sys_ram_total(void) {
    MEMORYSTATUSEX m = {.dwLength = sizeof m};
    return GlobalMemoryStatusEx(&m) ? (int64_t)m.ullTotalPhys : 0;
}

int64_t mt_sys_ram_available(void) {
    MEMORYSTATUSEX m = {.dwLength = sizeof m};
    return GlobalMemoryStatusEx(&m) ? (int64_t)m.ullAvailPhys : -1;
}

int mt_sys_cpus(void) {
    DWORD n = GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
    return n > 0 ? (int)n : 1;
}

size_t mt_sys_page_size(void) {
    SYSTEM_INFO si;
    GetSystemInfo(&si);
    return si.dwPageSize ? si.dwPageSize : 4096;
}

int64_t mt_sys_disk_free(const char *dir) {
    wchar_t *w = win32_wide(dir);
    if (!w) return -1;
    ULARGE_INTEGER avail;
    BOOL ok = GetDiskFreeSpaceExW(w, &avail, NULL, NULL);
    free(w);
    if (!ok) {
        errno = GetLastError() == ERROR_ACCESS_DENIED ? EACCES : ENOENT;
        return -1;
    }
    return (int64_t)avail.QuadPart;
}

/* The first adapter that is not a software renderer (Microsoft Basic Render
 * Driver, WARP). */
void mt_sys_gpu(char *name, size_t cap, int64_t *vram) {
    name[0] = '\0';
    *vram = 0;
    IDXGIFactory1 *f = NULL;
    if (FAILED(CreateDXGIFactory1(&IID_IDXGIFactory1, (void **)&f))) return;
    IDXGIAdapter1 *a = NULL;
    for (UINT i = 0; IDXGIFactory1_EnumAdapters1(f, i, &a) == S_OK; i++) {
        DXGI_ADAPTER_DESC1 d;
        bool take = SUCCEEDED(IDXGIAdapter1_GetDesc1(a, &d)) &&
                    !(d.Flags & DXGI_ADAPTER_FLAG_SOFTWARE) && d.VendorId != 0x1414;
        if (take && win32_utf8(d.Description, name, cap) == 0)
            *vram = (int64_t)d.DedicatedVideoMemory;
        IDXGIAdapter1_Release(a);
        if (name[0]) break;
    }
    IDXGIFactory1_Release(f);
}

int mt_sys_host_name(char *out, size_t cap) {
    wchar_t host[256];
    DWORD n = sizeof host / sizeof host[0];
    if (cap == 0) return -1;
    if (!GetComputerNameExW(ComputerNameDnsHostname, host, &n) || !host[0] ||
        win32_utf8(host, out, cap) != 0) {
        out[0] = '\0';
        return -1;
    }
    out[strcspn(out, ".")] = '\0';
    return 0;
}

bool mt_sys_firewall_blocks(char *hint, size_t cap) {
    char *show[] = {"netsh", "advfirewall", "firewall", "show", "rule", "name=MoonTail node", NULL};
    if (mt_proc_run(show, true) == 0) return false; /* the rule install.cmd makes is there */
    char self[1024] = "moontail.exe";
    mt_self_exe(self, sizeof self);
    snprintf(hint, cap,
             "Windows Firewall may refuse the other PCs of the cell: allow them in, as an"
             " administrator: netsh advfirewall firewall add rule name=\"MoonTail node\" dir=in"
             " action=allow program=\"%s\" enable=yes profile=private,domain (or allow"
             " moontail.exe when Windows asks)",
             self);
    return true;
}

/* Windows limits handles and sockets only by memory */
int64_t mt_sys_open_files(int64_t want) {
    return want;
}

int mt_sys_home_dir(char *out, size_t cap) {
    if (win32_env("MOONTAIL_HOME", out, cap) == 0) return 0;
    char base[1024];
    if (win32_env("LOCALAPPDATA", base, sizeof base) != 0) return -1;
    return snprintf(out, cap, "%s\\MoonTail", base) < (int)cap ? 0 : -1;
}

int mt_sys_cache_dir(char *out, size_t cap) {
    char base[1024];
    if (win32_env("LOCALAPPDATA", base, sizeof base) != 0) return -1;
    return snprintf(out, cap, "%s\\MoonTail\\cache", base) < (int)cap ? 0 : -1;
}
