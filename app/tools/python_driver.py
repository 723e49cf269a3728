# threadbox code_execution driver: the persistent Python interpreter of a
# container (code_execution_20260120 and later). It reads one JSON request a
# line on stdin ({"id", "code", "env", "cell_timeout", "max_output",
# "outputs_dir"}) and answers each on stdout with a JSON object ({"id",
# "stdout", "stderr", "return_code", "timed_out", "files", "stdout_truncated",
# "stderr_truncated"}) cut into lines "\x00TBPY <id> + <piece>", the last
# one "\x00TBPY <id> $ <piece>".
# Variables live in one namespace between requests.
import io, json, os, shutil, signal, sys, tempfile, traceback, contextlib

# Answers go to a copy of stdout (a pipe), in lines short enough that no
# other writer to it (a thread or a subprocess of a cell) can split one.
_out = os.dup(1)
_CHUNK = 3800  # an answer line stays under PIPE_BUF (4096 bytes)
# Requests come on the original stdin; cells and their subprocesses get
# /dev/null, so that input() or a child reading stdin cannot eat a request.
_in = os.fdopen(os.dup(0), "r")
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
sys.stdin = open(os.devnull)
_ns = {"__name__": "__main__"}
_armed = [False]


class _CellTimeout(BaseException):
    """Raised in a cell that ran past its wall-clock limit."""


def _alarm(signum, frame):
    if _armed[0]:
        raise _CellTimeout()


signal.signal(signal.SIGALRM, _alarm)


class _Capped(io.TextIOBase):
    """A text sink keeping at most limit characters."""

    def __init__(self, limit):
        self.limit, self.parts, self.size, self.cut = limit, [], 0, False

    def writable(self):
        return True

    def write(self, s):
        room = self.limit - self.size
        if room > 0:
            self.parts.append(s[:room])
            self.size += min(len(s), room)
        if len(s) > max(room, 0):
            self.cut = True
        return len(s)

    def value(self):
        return "".join(self.parts)


def _collect(outdir, dest):
    """Moves the top-level regular files of outdir into dest; returns their new paths."""
    moved = []
    try:
        names = sorted(os.listdir(outdir))
    except OSError:
        return moved
    for name in names:
        src = os.path.join(outdir, name)
        if os.path.isfile(src) and not os.path.islink(src):
            try:
                os.makedirs(dest, exist_ok=True)
                shutil.move(src, os.path.join(dest, name))
                moved.append(os.path.join(dest, name))
            except OSError:
                pass
    shutil.rmtree(outdir, ignore_errors=True)
    return moved


def _snapshot(dest):
    """Returns {path: (mtime_ns, size)} of the regular files at the top of dest."""
    out = {}
    try:
        with os.scandir(dest) as it:
            for e in it:
                if e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    out[e.path] = (st.st_mtime_ns, st.st_size)
    except OSError:
        pass
    return out


def _run(req):
    limit = float(req.get("cell_timeout") or 0)
    cap = int(req.get("max_output") or 1 << 20)
    out, err = _Capped(cap), _Capped(cap)
    rc, timed_out = 0, False
    outdir, before = None, {}
    if req.get("outputs_dir"):
        outdir = tempfile.mkdtemp(prefix="threadbox-out-")
        os.environ["OUTPUT_DIR"] = outdir
        before = _snapshot(req["outputs_dir"])
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = compile(req.get("code", ""), "<cell>", "exec")
                if limit > 0:
                    # Again every second after the limit: a cell that swallows
                    # the exception is interrupted once more.
                    signal.setitimer(signal.ITIMER_REAL, limit, 1.0)
                    _armed[0] = True
                exec(code, _ns)
            except _CellTimeout:
                timed_out = True
            except SystemExit as e:
                if e.code is None:
                    rc = 0
                elif isinstance(e.code, int):
                    rc = e.code
                else:
                    print(e.code, file=sys.stderr)
                    rc = 1
            except BaseException:
                # Without the driver's own frame.
                t, v, tb = sys.exc_info()
                traceback.print_exception(t, v, tb.tb_next)
                rc = 1
            finally:
                _armed[0] = False
                signal.setitimer(signal.ITIMER_REAL, 0)
    except _CellTimeout:
        _armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        timed_out = True
    if timed_out:
        rc = 124
    sys.stdout.flush()
    files = []
    if outdir:
        # The files moved from $OUTPUT_DIR, and those the cell wrote straight
        # into the outputs folder (new or changed at its top level).
        files = _collect(outdir, req["outputs_dir"])
        for path, st in sorted(_snapshot(req["outputs_dir"]).items()):
            if before.get(path) != st and path not in files:
                files.append(path)
    return {"id": req.get("id"), "stdout": out.value(), "stderr": err.value(), "return_code": rc,
            "timed_out": timed_out, "files": files, "stdout_truncated": out.cut, "stderr_truncated": err.cut}


def _send(res):
    """Writes the answer as lines NUL "TBPY <id> <+ or $> <piece of its JSON>", $ on the last."""
    # UTF-8 whatever the locale; a lone surrogate becomes "?". JSON escapes
    # every control character, so no piece holds a newline or a NUL.
    data = json.dumps(res, ensure_ascii=False).encode("utf-8", "replace")
    head = b"\x00TBPY " + str(res.get("id")).encode() + b" "
    try:
        sys.stdout.flush()
    except Exception:
        pass
    for i in range(0, max(len(data), 1), _CHUNK):
        line = head + (b"+ " if i + _CHUNK < len(data) else b"$ ") + data[i:i + _CHUNK] + b"\n"
        while line:
            line = line[os.write(_out, line):]


# The cell's CPU time for usage metering: user and system time of this
# process and of the children it waited for (what the agent's wait4
# counts for a command). os.times is taken before any cell runs, so a cell
# that replaces os.times does not change what is counted.
_times = os.times


def _cpu(t0, t1):
    return max(0.0, (t1.user - t0.user) + (t1.system - t0.system) +
               (t1.children_user - t0.children_user) + (t1.children_system - t0.children_system))


def _main():
    for line in _in:
        if not line.strip():
            continue
        req = json.loads(line)
        for k, v in (req.get("env") or {}).items():
            os.environ[k] = v
        t0 = _times()
        try:
            res = _run(req)
        except _CellTimeout:
            res = {"id": req.get("id"), "stdout": "", "stderr": "", "return_code": 124, "timed_out": True, "files": []}
        res["cpu_seconds"] = _cpu(t0, _times())
        _send(res)


_main()
