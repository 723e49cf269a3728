# threadbox repl_execute driver: a persistent Python REPL fed one JSON
# request per line on stdin ({"id", "code", "env"}); it answers each with one
# line "\x00TBREPL <json>" on stdout ({"id", "stdout", "stderr", "value",
# "error", "final"}). Variables live in one namespace between requests.
import ast, io, json, os, re, sys, traceback, contextlib, urllib.request

_out = sys.stdout
# Requests come on the original stdin; the code and its subprocesses get
# /dev/null, so that input() or a child reading stdin cannot eat a request.
_in = os.fdopen(os.dup(0), "r")
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
sys.stdin = open(os.devnull)
_ns = {"__name__": "__main__"}
_final = {}


def peek(x, start=0, n=2000):
    """Return n characters of x from start: a string, a file path or any value's repr."""
    if isinstance(x, str) and len(x) < 4096 and os.path.isfile(x):
        with open(x, "r", errors="replace") as f:
            f.seek(0)
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


for _f in (peek, grep, chunk_indices, llm_query, FINAL):
    _ns[_f.__name__] = _f


def _run(code):
    out, err = io.StringIO(), io.StringIO()
    value = error = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            tree = ast.parse(code, "<repl>", "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, "<repl>", "exec"), _ns)
            if last is not None:
                v = eval(compile(last, "<repl>", "eval"), _ns)
                if v is not None:
                    value = repr(v)
        except SystemExit as e:
            error = "SystemExit: %s" % (e.code,)
        except BaseException:
            error = traceback.format_exc()
    return out.getvalue(), err.getvalue(), value, error


# The call's CPU time for usage metering: user and system time of this
# process and of the children it waited for (what the agent's wait4
# counts for a command). os.times is taken before any code runs, so code
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
        _final.clear()
        t0 = _times()
        stdout, stderr, value, error = _run(req.get("code", ""))
        res = {"id": req.get("id"), "stdout": stdout, "stderr": stderr, "value": value, "error": error,
               "cpu_seconds": _cpu(t0, _times()),
               "final": None if "value" not in _final else (_final["value"] if isinstance(_final["value"], str) else repr(_final["value"]))}
        _out.write("\x00TBREPL " + json.dumps(res) + "\n")
        _out.flush()


_main()
