/* sysinfo.h - facts about this machine and user that the OS keeps in
 * different places on Linux (/proc, /sys, sysconf, statvfs, $HOME) and
 * Windows (Win32 calls, %LOCALAPPDATA%): memory, processors, page size, free
 * disk, the first GPU, the host name, the open-file limit and the per-user
 * directories. sysinfo_posix.c and sysinfo_win32.c. */
#ifndef MOONTAIL_SYSINFO_H
#define MOONTAIL_SYSINFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Physical memory in bytes; 0 if unknown. */
int64_t mt_sys_ram_total(void);
/* Memory the OS could hand out now, page cache included, in bytes; -1 if unknown. */
int64_t mt_sys_ram_available(void);
/* Online logical processors (at least 1). */
int mt_sys_cpus(void);
/* The virtual-memory page size in bytes. */
size_t mt_sys_page_size(void);
/* Bytes this user may still write to the file system holding dir; -1 on an
 * error (errno set). */
int64_t mt_sys_disk_free(const char *dir);
/* The first GPU: its name (empty if none was found) and its dedicated memory
 * in bytes (0 if unknown). */
void mt_sys_gpu(char *name, size_t cap, int64_t *vram);
/* The machine's name (up to the first '.'), or -1 with out = "". */
int mt_sys_host_name(char *out, size_t cap);
/* Whether this machine's firewall is likely to refuse other machines'
 * connections to this program (Windows: Windows Firewall has no inbound rule
 * named "MoonTail node"), with what to do about it in hint. Always false on
 * POSIX, whose firewalls MoonTail leaves to the operator. */
bool mt_sys_firewall_blocks(char *hint, size_t cap);
/* Raises the number of files and sockets this process may hold open towards
 * want and returns what it may hold now (want or more: no limit below it). */
int64_t mt_sys_open_files(int64_t want);
/* MoonTail's per-user directory: $MOONTAIL_HOME, else $HOME/.moontail on
 * POSIX and %LOCALAPPDATA%\MoonTail on Windows; -1 if none can be named. */
int mt_sys_home_dir(char *out, size_t cap);
/* MoonTail's per-user cache directory: $XDG_CACHE_HOME (absolute) or
 * $HOME/.cache, then /moontail, on POSIX; %LOCALAPPDATA%\MoonTail\cache on
 * Windows; -1 if none can be named. Its parent may not exist yet either. */
int mt_sys_cache_dir(char *out, size_t cap);

#endif
