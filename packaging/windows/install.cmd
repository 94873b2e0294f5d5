@echo off
rem install.cmd - makes this PC a node of a MoonTail cell, without questions, so that an
rem operator can run it on every PC of the cell (from a share, a USB stick or a remote
rem shell). It copies moontail.exe and its DLL to %LOCALAPPDATA%\MoonTail\bin, then runs
rem "moontail setup": this user's identity and configuration under %LOCALAPPDATA%\MoonTail,
rem the cell's account token, and the node started in the background.
rem
rem usage: install.cmd REGISTRY_URL TOKEN_FILE [NODE_NAME]
rem   REGISTRY_URL  the cell's registry, e.g. http://10.0.0.2:7400 (the operator's)
rem   TOKEN_FILE    a file holding the cell's account token (moontail account new)
rem   NODE_NAME     optional; the default is the PC's name and a part of its key
setlocal
if "%~2"=="" (
    echo usage: install.cmd REGISTRY_URL TOKEN_FILE [NODE_NAME] 1>&2
    exit /b 2
)
if not exist "%~2" (
    echo install.cmd: no token file %~2 1>&2
    exit /b 2
)
set "BIN=%LOCALAPPDATA%\MoonTail\bin"
if not exist "%BIN%" mkdir "%BIN%"
copy /y "%~dp0moontail.exe" "%BIN%\moontail.exe" >nul
if errorlevel 1 goto :nocopy
copy /y "%~dp0libmicrohttpd-12.dll" "%BIN%\libmicrohttpd-12.dll" >nul
if errorlevel 1 goto :nocopy
rem other PCs of the cell connect to this one: a Windows Firewall rule for the program
rem (this needs an administrator; without one, Windows asks when the node first listens)
netsh advfirewall firewall add rule name="MoonTail node" dir=in action=allow program="%BIN%\moontail.exe" enable=yes profile=private,domain >nul 2>&1
if errorlevel 1 echo install.cmd: no Windows Firewall rule made (not an administrator?); allow moontail.exe when Windows asks 1>&2
if "%~3"=="" (
    "%BIN%\moontail.exe" setup --accept-terms --registry "%~1" --token-file "%~f2"
) else (
    "%BIN%\moontail.exe" setup --accept-terms --registry "%~1" --token-file "%~f2" --name "%~3"
)
exit /b %ERRORLEVEL%
:nocopy
echo install.cmd: cannot copy MoonTail into %BIN% 1>&2
exit /b 1
