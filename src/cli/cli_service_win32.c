/* cli_service_win32.c - cli_service.h on Windows: `moontail.exe setup
 * --accept-terms` (which starts the node in the background with the saved
 * configuration) made to run at each logon of this user, as a scheduled task
 * when Windows lets this user make one (schtasks), else as a value of the
 * user's Run key; the caller then starts the node now. */
#include "cli_service.h"
#include "moontail/proc.h"

#include <stdio.h>
#include <string.h>
#include <windows.h>

#define TASK_NAME L"MoonTail node"

bool cli_service_available(void) {
    return true;
}

/* "self" setup --accept-terms, as a command line in UTF-16 */
static bool logon_command(const char *self, wchar_t *out, size_t cap) {
    wchar_t wself[MAX_PATH * 4];
    if (!MultiByteToWideChar(CP_UTF8, 0, self, -1, wself, (int)(sizeof wself / sizeof wself[0])))
        return false;
    int n = _snwprintf(out, cap, L"\"%ls\" setup --accept-terms", wself);
    return n > 0 && (size_t)n < cap;
}

int cli_service_start(const cli_config *c, const char *self, cli_note_made note) {
    (void)c, (void)note;
    wchar_t cmd[MAX_PATH * 4 + 64];
    if (!logon_command(self, cmd, sizeof cmd / sizeof cmd[0])) {
        fprintf(stderr, "moontail setup: this program's path is too long for a logon task\n");
        return -1;
    }
    char cmd8[sizeof cmd];
    WideCharToMultiByte(CP_UTF8, 0, cmd, -1, cmd8, (int)sizeof cmd8, NULL, NULL);
    char *task[] = {"schtasks", "/Create", "/F",  "/TN", "MoonTail node",
                    "/SC",      "ONLOGON", "/TR", cmd8,  NULL};
    if (mt_proc_run(task, true) == 0) {
        printf("volunteering: starts at each logon (scheduled task 'MoonTail node';"
               " remove: schtasks /Delete /TN \"MoonTail node\" /F)\n");
        return 1;
    }
    /* without the right to make a logon task: the user's own Run key */
    HKEY key;
    LSTATUS rc =
        RegCreateKeyExW(HKEY_CURRENT_USER, L"Software\\Microsoft\\Windows\\CurrentVersion\\Run", 0,
                        NULL, 0, KEY_SET_VALUE, NULL, &key, NULL);
    if (rc == ERROR_SUCCESS) {
        rc = RegSetValueExW(key, TASK_NAME, 0, REG_SZ, (const BYTE *)cmd,
                            (DWORD)((wcslen(cmd) + 1) * sizeof cmd[0]));
        RegCloseKey(key);
    }
    if (rc != ERROR_SUCCESS) {
        fprintf(stderr,
                "moontail setup: cannot make the node start at logon (neither a scheduled task"
                " nor the Run key: error %ld); it runs until the next logoff\n",
                (long)rc);
        return 1;
    }
    printf("volunteering: starts at each logon "
           "(HKCU\\Software\\Microsoft\\Windows\\CurrentVersion\\Run,"
           " value 'MoonTail node')\n");
    return 1;
}
