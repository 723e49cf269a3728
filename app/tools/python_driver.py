# threadbox Python driver: the persistent Python interpreter of a container,
# for the code_execution sub-tool (code_execution_20260120 and later) and
# for the sandbox_v1 tool repl_execute, each in an interpreter of its own.
# It reads one JSON request a line on stdin ({"id", "code", "env",
# "cell_timeout", "max_output", "outputs_dir", "repl"}) and answers each on
# stdout with a JSON object ({"id", "stdout", "stderr", "return_code",
# "timed_out", "files", "stdout_truncated", "stderr_truncated",
# "cpu_seconds"}) cut into lines "\x00TBPY <id> + <piece>", the last one
# "\x00TBPY <id> $ <piece>". Variables live in one namespace between
# requests.
#
# A request with "repl": true is a repl_execute call: the helpers peek,
# grep, chunk_indices, llm_query and FINAL are in the namespace, the value
# of a final expression is answered as "value" (its repr), an exception as
# "error" (its traceback) rather than on stderr, and what FINAL() marked as
# "final".
#
# Programmatic tool calling: a request may list the client's tools
# ("tools": [{"name", "input_schema", "allowed"}], "caller", "tool_timeout");
# each becomes an async function of the namespace. Awaiting one pauses the
# cell: the driver answers {"id", "calls": [{"id", "name", "input"}]} (the
# calls made together, as asyncio.gather makes them) and waits on stdin for
# {"id", "results": [{"tool_use_id", "content", "is_error"}]} (then the cell
# goes on) or {"id", "cancel": reason}; past tool_timeout seconds the calls
# raise TimeoutError in the cell. The cell's wall-clock limit does not run
# while it waits.
import asyncio, ast, inspect, io, json, os, re, secrets, select, shutil, signal, sys, tempfile, time, traceback, contextlib, urllib.request

# Answers go to a copy of stdout (a pipe), in lines short enough that no
# other writer to it (a thread or a subprocess of a cell) can split one.
_out = os.dup(1)
_CHUNK = 3800  # an answer line stays under PIPE_BUF (4096 bytes)
# Requests come on the original stdin; cells and their subprocesses get
# /dev/null, so that input() or a child reading stdin cannot eat a request.
_infd = os.dup(0)
_inbuf = [b""]
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


def _readline(timeout=None):
    """Returns the next request line, None when timeout seconds passed first; EOFError at the end of input."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while b"\n" not in _inbuf[0]:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([_infd], [], [], left)[0]:
                return None
        chunk = os.read(_infd, 1 << 16)
        if not chunk:
            raise EOFError()
        _inbuf[0] += chunk
    line, _, _inbuf[0] = _inbuf[0].partition(b"\n")
    return line.decode("utf-8", "replace")


class ToolError(Exception):
    """A client tool answered the call with is_error: its content is the message."""


class ToolCallAbandoned(BaseException):
    """Raised in a paused cell that the server gave up (a new cell came instead of the results)."""


# The running cell's programmatic tool calls.
_calls = {"req": None, "pending": [], "scheduled": False, "gone": None}


def _text(content):
    """The text of a tool_result's content: a string, or the text of its blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return "" if content is None else json.dumps(content)


def _value(text):
    """A result's value in the code: its JSON decoded when it is JSON, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _make_tool(spec, caller):
    name = spec.get("name", "")
    schema = spec.get("input_schema") or {}
    props = list((schema.get("properties") or {}).keys()) if isinstance(schema, dict) else []
    allowed = bool(spec.get("allowed"))

    async def tool(*args, **kwargs):
        if not allowed:
            raise PermissionError("The tool %r cannot be called from code: its allowed_callers does not list %s; only the model can call it." % (name, caller))
        if _calls["gone"]:
            raise _calls["gone"]
        inp = dict(kwargs)
        if len(args) > len(props):
            raise TypeError("%s() takes at most %d positional arguments, the properties of its input_schema (%s); %d given" % (name, len(props), ", ".join(props), len(args)))
        for k, v in zip(props, args):
            if k in inp:
                raise TypeError("%s() got multiple values for argument %r" % (name, k))
            inp[k] = v
        json.dumps(inp)  # TypeError now, in the caller, for input JSON cannot carry
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        # The call's id names its cell, so that a server that did not pause
        # the cell (after a restart or a hand-over) can resume it.
        cid = "toolu_%s_%s" % (_calls["req"].get("id"), secrets.token_hex(6))
        _calls["pending"].append(({"id": cid, "name": name, "input": inp}, fut))
        if not _calls["scheduled"]:
            _calls["scheduled"] = True
            loop.call_soon(_flush_soon, loop, 3)
        return await fut

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = spec.get("description") or None
    return tool


def _flush_soon(loop, n):
    """Lets the calls made together (asyncio.gather) gather, then pauses for them."""
    if n > 0:
        loop.call_soon(_flush_soon, loop, n - 1)
    else:
        _flush()


def _flush():
    batch, _calls["pending"], _calls["scheduled"] = _calls["pending"], [], False
    batch = [(c, f) for c, f in batch if not f.done()]
    if not batch:
        return
    req = _calls["req"]
    if _calls["gone"]:
        for _, f in batch:
            f.set_exception(_calls["gone"])
        return
    armed = _armed[0]
    _armed[0] = False
    left = signal.setitimer(signal.ITIMER_REAL, 0)[0]  # the cell's clock stops while it waits
    try:
        _send({"id": req.get("id"), "calls": [c for c, _ in batch]})
        wait = float(req.get("tool_timeout") or 270)
        deadline = time.monotonic() + wait
        msg = None
        while msg is None:
            line = _readline(max(0.0, deadline - time.monotonic()))
            if line is None:
                break
            if not line.strip():
                continue
            m = json.loads(line)
            if m.get("id") == req.get("id"):
                msg = m
            elif "code" in m:
                # A new cell while this one waits: the server that paused
                # it is gone (another attached to this interpreter after a
                # restart or a hand-over). This cell ends unanswered and the
                # new one runs next.
                _inbuf[0] = line.encode("utf-8") + b"\n" + _inbuf[0]
                _calls["silent"] = True
                msg = {"cancel": "A new cell started before the client answered this cell's tool calls, so they were abandoned."}
    finally:
        _armed[0] = armed
        if armed:
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), 1.0)
    if msg is None:
        _calls["gone"] = TimeoutError("No result for the tool calls within %gs: the client did not answer in time, so the calls were abandoned and this cell cannot call tools any more." % wait)
        for _, f in batch:
            f.set_exception(_calls["gone"])
        return
    if "cancel" in msg:
        _calls["gone"] = ToolCallAbandoned(msg.get("cancel") or "The paused cell was abandoned.")
        for _, f in batch:
            f.set_exception(_calls["gone"])
        return
    results = {r.get("tool_use_id"): r for r in msg.get("results") or []}
    for c, f in batch:
        r = results.get(c["id"])
        if r is None:
            f.set_exception(ToolError("The client sent no result for the call of %s (%s)." % (c["name"], c["id"])))
        elif r.get("is_error"):
            f.set_exception(ToolError(_text(r.get("content"))))
        else:
            f.set_result(_value(_text(r.get("content"))))


_loop = asyncio.new_event_loop()
_DRIVER = (lambda: None).__code__.co_filename
_ASYNCIO = os.path.dirname(asyncio.__file__) + os.sep


def _internal(filename):
    """Reports whether a traceback frame is the driver's or asyncio's, not the cell's."""
    return filename == _DRIVER or filename.startswith(_ASYNCIO)


def _exec(code):
    """Runs compiled code and returns its value (an expression's; None for
    statements); code with top-level await runs on the driver's event loop."""
    if not code.co_flags & inspect.CO_COROUTINE:
        return eval(code, _ns)
    task = _loop.create_task(eval(code, _ns))
    try:
        return _loop.run_until_complete(task)
    finally:
        if not task.done():
            task.cancel()
            try:
                _loop.run_until_complete(task)
            except BaseException:
                pass


def _compile(src, repl):
    """Compiles a request's code: a cell whole; a repl_execute call's with
    its final expression apart, to answer its value."""
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    if not repl:
        return compile(src, "<cell>", "exec", flags=flags), None
    tree = compile(src, "<repl>", "exec", flags=flags | ast.PyCF_ONLY_AST)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = compile(ast.Expression(tree.body.pop().value), "<repl>", "eval", flags=flags)
    return compile(tree, "<repl>", "exec", flags=flags), last


def _traceback():
    """The exception being handled, without the driver's own frames nor asyncio's."""
    t, v, tb = sys.exc_info()
    te = traceback.TracebackException(t, v, tb.tb_next)
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if not _internal(f.filename)])
    return "".join(te.format())


def _run(req):
    repl = bool(req.get("repl"))
    limit = float(req.get("cell_timeout") or 0)
    cap = int(req.get("max_output") or 1 << 20)
    out, err = _Capped(cap), _Capped(cap)
    rc, timed_out, value, error = 0, False, None, None
    outdir, before = None, {}
    if req.get("outputs_dir"):
        outdir = tempfile.mkdtemp(prefix="threadbox-out-")
        os.environ["OUTPUT_DIR"] = outdir
        before = _snapshot(req["outputs_dir"])
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code, last = _compile(req.get("code", ""), repl)
                if limit > 0:
                    # Again every second after the limit: a cell that swallows
                    # the exception is interrupted once more.
                    signal.setitimer(signal.ITIMER_REAL, limit, 1.0)
                    _armed[0] = True
                _exec(code)
                if last is not None:
                    v = _exec(last)
                    if v is not None:
                        value = repr(v)
            except _CellTimeout:
                timed_out = True
            except SystemExit as e:
                if repl:
                    error, rc = "SystemExit: %s" % (e.code,), 1
                elif e.code is None:
                    rc = 0
                elif isinstance(e.code, int):
                    rc = e.code
                else:
                    print(e.code, file=sys.stderr)
                    rc = 1
            except BaseException:
                if repl:
                    error = _traceback()
                else:
                    sys.stderr.write(_traceback())
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
    res = {"id": req.get("id"), "stdout": out.value(), "stderr": err.value(), "return_code": rc,
           "timed_out": timed_out, "files": files, "stdout_truncated": out.cut, "stderr_truncated": err.cut}
    if repl:
        res.update(value=value, error=error, final=_final_text())
    return res


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


# The helpers of repl_execute calls, put in the namespace by the first one.
_final = {}


def peek(x, start=0, n=2000):
    """Return n characters of x from start: a string, a file path or any value's repr."""
    if isinstance(x, str) and len(x) < 4096 and os.path.isfile(x):
        with open(x, "r", errors="replace") as f:
            return f.read(start + n)[start:]
    s = x if isinstance(x, str) else repr(x)
    return s[start:start + n]


def grep(pattern, x, flags=0, max_results=200):
    """Return [(line_number, line)] of the lines of x (text, file path or list of lines) matching pattern."""
    if isinstance(x, str) and len(x) < 4096 and "\n" not in x and os.path.isfile(x):
        with open(x, "r", errors="replace") as f:
            lines = f.read().splitlines()
    elif isinstance(x, str):
        lines = x.splitlines()
    else:
        lines = [str(l) for l in x]
    rx = re.compile(pattern, flags)
    out = []
    for i, l in enumerate(lines, 1):
        if rx.search(l):
            out.append((i, l))
            if len(out) >= max_results:
                break
    return out


def chunk_indices(length, size, overlap=0):
    """Return [(start, end)] windows of size covering range(length), overlapping by overlap."""
    if hasattr(length, "__len__"):
        length = len(length)
    if size <= 0 or overlap < 0 or overlap >= size:
        raise ValueError("need size > 0 and 0 <= overlap < size")
    out, start = [], 0
    while start < length:
        end = min(start + size, length)
        out.append((start, end))
        if end == length:
            break
        start = end - overlap
    return out


def llm_query(prompt, max_tokens=1024, system=None, model=None):
    """Ask the model through the product's API (as the requesting user) and return its text."""
    base = os.environ.get("ANTHROPIC_BASE_URL", "").rstrip("/")
    token = os.environ.get("ANTHROPIC_AUTH_TOKEN", "")
    if not base or not token:
        raise RuntimeError("llm_query: ANTHROPIC_BASE_URL and ANTHROPIC_AUTH_TOKEN are not set")
    body = {"model": model or os.environ.get("ANTHROPIC_MODEL", "default"), "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": prompt}]}
    if system:
        body["system"] = system
    req = urllib.request.Request(base + "/v1/messages", data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json", "authorization": "Bearer " + token,
                                          "anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(req, timeout=600) as r:
        resp = json.loads(r.read().decode())
    return "".join(b.get("text", "") for b in resp.get("content", []) if b.get("type") == "text")


def FINAL(value):
    """Mark value as the final answer of the computation."""
    _final["value"] = value
    return value


def _final_text():
    """What FINAL() marked in this call: a string as it is, else its repr; None when it was not called."""
    if "value" not in _final:
        return None
    v = _final["value"]
    return v if isinstance(v, str) else repr(v)


_helpers = [peek, grep, chunk_indices, llm_query, FINAL]


_injected = {}


def _tools(req):
    """Puts the request's client tools into the namespace as async functions."""
    caller = req.get("caller") or "code_execution"
    # The functions of an earlier request's tools go, unless the cell's code
    # rebound the name.
    for name, fn in list(_injected.items()):
        if _ns.get(name) is fn:
            del _ns[name]
    _injected.clear()
    for spec in req.get("tools") or []:
        if spec.get("name", "").isidentifier():
            _ns[spec["name"]] = _injected[spec["name"]] = _make_tool(spec, caller)
    _ns["ToolError"] = ToolError
    _calls.update(req=req, pending=[], scheduled=False, gone=None, silent=False)


def _main():
    while True:
        try:
            line = _readline()
        except EOFError:
            return
        if not line.strip():
            continue
        req = json.loads(line)
        if "code" not in req:
            if req.get("attached") and req.get("id"):
                # Results from a server that attached to this interpreter
                # for a cell that is not paused: it must not wait for them.
                _send({"id": req.get("id"), "not_paused": True, "stdout": "", "stderr": "", "return_code": 1, "files": []})
            continue  # the results or cancel of a cell that is over
        _tools(req)
        if req.get("repl"):
            while _helpers:
                f = _helpers.pop()
                _ns[f.__name__] = f
            _final.clear()
        for k, v in (req.get("env") or {}).items():
            os.environ[k] = v
        t0 = _times()
        try:
            res = _run(req)
        except _CellTimeout:
            res = {"id": req.get("id"), "stdout": "", "stderr": "", "return_code": 124, "timed_out": True, "files": []}
        res["cpu_seconds"] = _cpu(t0, _times())
        if not _calls.get("silent"):
            _send(res)


_main()
