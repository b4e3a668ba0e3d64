#!/usr/bin/env python3
"""The device runner's library: reads a suite file, checks it, and runs it
(or, with --dry-run, prints the commands it would run). scripts/device_run.sh
is the entry point; the suite format is in validation/suites/README.md.

  python3 scripts/device_suite.py [--dry-run] [--budget S] SUITE.json

Order of a run: machine facts; build; setup commands; calibrate (one GPU,
then mpirun -np RANKS); the predictions of every sweep that uses a profile
measured here (and of `predict`), all written before any plan runs; the
sweeps (`planner validate`); the ranking checks (`planner validate --rank-question`); the single runs (`planner exec`); the PyTorch
baselines; the closing commands. Each step gets at most what is left of the
call's budget (budget_s, default 560 s: the device tool ends a command at
600 s); once under 40 s are left, the remaining steps are skipped and named
in skipped.txt.
Results: $OUT/r/ (log.txt, one console file and one result folder or file per
step), packed into $OUT/results.tgz at exit, whatever happened (the device
tool returns few files). Bad suite: one line on stderr, exit 2, nothing run.
Python 3, standard library only.
"""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import time

FORMAT = "planner-device-suite"
TOP = {"format", "version", "description", "machine", "gpus", "budget_s", "replaces", "results", "build",
       "clock_log_ms", "setup", "calibrate", "predict", "sweeps", "rankings", "exec", "baselines", "commands",
       "pending"}
BUILD = {"targets", "tests"}
CALIBRATE = {"one_gpu", "ranks", "budget_s", "measure_s", "quick"}
SWEEP = {"name", "file", "profile", "only", "half", "gpus", "kernels", "steps", "warmup", "headroom", "timeout_s",
         "plots", "args", "env"}
PREDICT = {"name", "file", "profile", "gpus"}
RANKING = {"name", "question", "top", "profile", "steps", "warmup", "headroom", "timeout_s", "plots", "env"}
EXEC = {"name", "plan", "gpu", "steps", "warmup", "profile", "trace", "kernels", "headroom", "args", "env", "timeout_s"}
BASELINE = {"name", "plan", "mode", "nproc", "reshard_after_forward", "steps", "warmup", "args", "timeout_s"}
COMMAND = {"name", "run", "timeout_s"}
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
            "PYTHONUNBUFFERED": "1"}
X = "./build-dev/planner"
MIN_STEP_S = 40


class SuiteError(Exception):
    pass


def keys(obj, allowed, where):
    if not isinstance(obj, dict):
        raise SuiteError(f"{where} must be an object")
    for k in obj:
        if k not in allowed:
            raise SuiteError(f"{where}: unknown key '{k}' (known: {', '.join(sorted(allowed))})")


def name_of(e, where, seen):
    n = e.get("name")
    if not isinstance(n, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", n):
        raise SuiteError(f"{where}: \"name\" must be letters, digits, '.', '_' or '-' (it names files)")
    if n in seen:
        raise SuiteError(f"{where}: name '{n}' is used twice")
    seen.add(n)
    return n


def repo_file(path, where, root, pending=()):
    """A file the suite names must exist (relative to the repository root) unless it is made during the run ($R/...)
    or the suite lists it under "pending" (committed before the run; a real run refuses while it is missing)."""
    if not isinstance(path, str) or not path:
        raise SuiteError(f"{where} must be a file path")
    if path.startswith("$R/") or path in pending:
        return path
    if not os.path.isfile(os.path.join(root, path)):
        raise SuiteError(f"{where}: no file {path}")
    return path


def load(path, root):
    try:
        s = json.load(open(path))
    except (OSError, json.JSONDecodeError) as e:
        raise SuiteError(f"suite {path}: {e}")
    keys(s, TOP, f"suite {path}")
    if s.get("format") != FORMAT or s.get("version") != 1:
        raise SuiteError(f"suite {path}: \"format\" must be \"{FORMAT}\" and \"version\" 1")
    if not isinstance(s.get("gpus"), int) or s["gpus"] < 1:
        raise SuiteError(f"suite {path}: \"gpus\" (the GPUs it needs) must be a positive whole number")
    seen = set()
    pending = s.get("pending", [])
    if not isinstance(pending, list) or not all(isinstance(x, str) and x and not x.startswith("$R/") for x in pending):
        raise SuiteError(f"suite {path}: \"pending\" must be a list of repository paths")
    s["pending"] = pending
    b = s.get("build", {"targets": ["planner"]})
    if b is not False:
        keys(b, BUILD, "build")
        if not b.get("targets") or not all(isinstance(t, str) for t in b["targets"]):
            raise SuiteError("build: \"targets\" must be a non-empty list of CMake targets")
    s["build"] = b
    cal = s.get("calibrate")
    ranks = 0
    if cal is not None:
        keys(cal, CALIBRATE, "calibrate")
        ranks = cal.get("ranks", 0)
        if not isinstance(ranks, int) or ranks == 1 or ranks < 0 or ranks > s["gpus"]:
            raise SuiteError("calibrate: \"ranks\" must be 0 (no mpirun) or 2 to gpus")
        ms = cal.get("measure_s", 0)
        if not isinstance(ms, int) or ms < 0 or ms > cal.get("budget_s", 260):
            raise SuiteError("calibrate: \"measure_s\" (calibrate --budget) must be whole seconds within budget_s")
        if not cal.get("one_gpu", True) and not ranks:
            raise SuiteError("calibrate: nothing to measure (one_gpu false and no ranks)")
    measured = set()
    if cal is not None and cal.get("one_gpu", True):
        measured.add("1gpu")
    if ranks:
        measured.add(f"{ranks}gpu")

    def profile(p, where):
        if p in (None, ""):
            return ""
        if re.fullmatch(r"\d+gpu", str(p)):
            if p not in measured:
                raise SuiteError(f"{where}: profile '{p}' is not measured by this suite's calibrate")
            return p
        return repo_file(p, f"{where}: profile", root, pending)

    for sec, allowed, fields in (("setup", COMMAND, ()), ("predict", PREDICT, ("file",)), ("sweeps", SWEEP, ("file",)),
                                 ("rankings", RANKING, ()), ("exec", EXEC, ("plan",)), ("baselines", BASELINE, ("plan",)),
                                 ("commands", COMMAND, ())):
        items = s.get(sec, [])
        if not isinstance(items, list):
            raise SuiteError(f"\"{sec}\" must be a list")
        for i, e in enumerate(items):
            where = f"{sec}[{i}]"
            keys(e, allowed, where)
            where = f"{sec} '{name_of(e, where, seen)}'"
            for f in fields:
                repo_file(e.get(f), f"{where}: {f}", root)
            if "profile" in allowed:
                e["profile"] = profile(e.get("profile"), where)
            if sec == "rankings" and not (isinstance(e.get("question"), str) and "--model" in e["question"]
                                          and "--gpus" in e["question"]):
                raise SuiteError(f"{where}: \"question\" must be a `planner plan` question with --model and --gpus")
            if sec == "rankings" and not (isinstance(e.get("top", 5), int) and 2 <= e.get("top", 5) <= 100):
                raise SuiteError(f"{where}: \"top\" must be 2 to 100 plans")
            if "run" in allowed and not isinstance(e.get("run"), str):
                raise SuiteError(f"{where}: \"run\" must be a shell command")
            if sec == "baselines" and e.get("mode", "eager") not in ("eager", "compile", "ddp", "fsdp2"):
                raise SuiteError(f"{where}: \"mode\" must be eager, compile, ddp or fsdp2")
            if "args" in e and not (isinstance(e["args"], list) and all(isinstance(x, str) for x in e["args"])):
                raise SuiteError(f"{where}: \"args\" must be a list of strings")
            for k in ("env",):
                if k in e and not (isinstance(e[k], dict) and all(isinstance(v, str) for v in e[k].values())):
                    raise SuiteError(f"{where}: \"env\" must map names to strings")
        s[sec] = items
    if not any(s[k] for k in ("setup", "predict", "sweeps", "rankings", "exec", "baselines", "commands")) and cal is None:
        raise SuiteError(f"suite {path}: nothing to run")
    return s


def steps(s, sp):
    """The suite as a list of (name, argv or shell text, env, limit seconds, log file stem)."""
    out = []
    b = s["build"]
    if b is not False:
        tests = "ON" if b.get("tests") else "OFF"
        cfg = (f"cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DPLANNER_BUILD_TESTS={tests} "
               f"-DCMAKE_PREFIX_PATH={sp}/torch/share/cmake -DNCCL_ROOT={sp}/nvidia/nccl")
        out.append(("build", f"{cfg} && cmake --build build-dev --target {' '.join(b['targets'])} -j $(nproc)", {}, 420))
    for c in s["setup"]:
        out.append((c["name"], c["run"], {}, c.get("timeout_s", 300)))
    cal = s.get("calibrate")
    if cal is not None:
        q = " --quick" if cal.get("quick") else ""
        q += f" --budget {cal['measure_s']}" if cal.get("measure_s") else ""
        lim = cal.get("budget_s", 260)
        if cal.get("one_gpu", True):
            out.append(("calibrate-1gpu", f"{X} calibrate{q} -o $R/calib/profile-1gpu.json",
                        {"CUDA_VISIBLE_DEVICES": "0"}, lim))
        r = cal.get("ranks", 0)
        if r:
            mp = (f"mpirun --allow-run-as-root -np {r} --bind-to none -x NCCL_NVLS_ENABLE "
                  "-x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS")
            out.append((f"calibrate-{r}gpu", f"{mp} {X} calibrate{q} -o $R/calib/profile-{r}gpu.json", {}, lim))

    def prof(p):
        return f"$R/calib/profile-{p}.json" if re.fullmatch(r"\d+gpu", p) else p

    # Predictions before any plan runs: every sweep predicted with a profile
    # measured in this call, and the suite's own `predict` list.
    pre = [(f"predicted-{w['name']}", w) for w in s["sweeps"] if re.fullmatch(r"\d+gpu", w["profile"])]
    pre += [(p["name"], p) for p in s["predict"]]
    pre += [(f"predicted-{w['name']}", w) for w in s["rankings"] if re.fullmatch(r"\d+gpu", w["profile"])]
    for n, w in pre:
        what = w["file"] if "file" in w else f"--rank-question {shlex.quote(w['question'])} --top {w.get('top', 5)}"
        a = f"{X} validate {what} -o $R/{n} --predict-only --no-plots --headroom {w.get('headroom', '0')}"
        a += f" --profile {prof(w['profile'])}" if w["profile"] else ""
        a += f" --gpus {w['gpus']}" if w.get("gpus") else ""
        out.append((n, a, {}, 60))
    for w in s["sweeps"]:
        a = f"{X} validate {w['file']} -o $R/{w['name']} --headroom {w.get('headroom', '0')} --timeout {w.get('timeout_s', 200)}"
        a += f" --profile {prof(w['profile'])}" if w["profile"] else ""
        for k in ("only", "gpus", "half", "steps", "warmup"):
            a += f" --{k} {shlex.quote(str(w[k]))}" if k in w else ""
        a += " --kernels" if w.get("kernels") else ""
        a += " --no-plots" if w.get("plots") is False else ""
        a += "".join(" " + arg(x) for x in w.get("args", []))  # more validate options, e.g. --moe-routing balanced
        out.append((w["name"], a, w.get("env", {}), 600))
    # Ranking checks: the top plans of a `planner plan` question, run as a sweep.
    for w in s["rankings"]:
        a = (f"{X} validate --rank-question {shlex.quote(w['question'])} --top {w.get('top', 5)} -o $R/{w['name']} "
             f"--headroom {w.get('headroom', '0')} --timeout {w.get('timeout_s', 200)}")
        a += f" --profile {prof(w['profile'])}" if w["profile"] else ""
        for k in ("steps", "warmup"):
            a += f" --{k} {shlex.quote(str(w[k]))}" if k in w else ""
        a += " --no-plots" if w.get("plots") is False else ""
        out.append((w["name"], a, w.get("env", {}), 600))
    for e in s["exec"]:
        n = e["name"]
        a = f"{X} exec {e['plan']} --steps {e.get('steps', 8)} --warmup {e.get('warmup', 3)} -o $R/{n}.exec.json"
        a += f" --profile {prof(e['profile'])}" if e["profile"] else ""
        a += f" --headroom {e['headroom']}" if "headroom" in e else ""
        a += f" --trace $R/{n}.trace.json" if e.get("trace") else ""
        a += " --kernels" if e.get("kernels") else ""
        a += "".join(" " + arg(x) for x in e.get("args", []))
        env = dict(e.get("env", {}))
        if e.get("gpu") is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(e["gpu"])
        out.append((n, a, env, e.get("timeout_s", 300)))
    for r in s["baselines"]:
        n, mode = r["name"], r.get("mode", "eager")
        tail = f"--steps {r.get('steps', 8)} --warmup {r.get('warmup', 3)} -o $R/{n}.ref.json"
        tail += "".join(" " + arg(x) for x in r.get("args", []))
        if mode in ("eager", "compile"):
            a = f"python3 benchmarks/pytorch_reference.py {r['plan']} {tail}" + (" --compile" if mode == "compile" else "")
            env = {"CUDA_VISIBLE_DEVICES": "0"}
        else:
            a = (f"torchrun --nproc_per_node {r.get('nproc', 2)} benchmarks/pytorch_dist_reference.py {r['plan']} "
                 f"--mode {mode}" + (f" --reshard-after-forward {r['reshard_after_forward']}" if "reshard_after_forward" in r else "")
                 + f" {tail}")
            env = {}
        out.append((n, a, env, r.get("timeout_s", 240)))
    for c in s["commands"]:
        out.append((c["name"], c["run"], {}, c.get("timeout_s", 300)))
    return out


def arg(x):
    """One argument of an exec or baseline: quoted, except a plain $R/ path, which
    the shell must expand (a quoted one reached h100_bench's reference literally)."""
    return x if re.fullmatch(r"\$R/[\w./-]+", x) else shlex.quote(x)


def show(name, cmd, env, limit):
    pre = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"[{name}] timeout -k 10 {limit} {pre + ' ' if pre else ''}bash -c {shlex.quote(cmd)}"


def run(s, suite_path, out_dir, budget):
    R = os.path.join(out_dir, "r")
    os.makedirs(os.path.join(R, "calib"), exist_ok=True)
    log = open(os.path.join(R, "log.txt"), "a")
    start = time.time()

    def say(msg):
        line = f"== {msg} ({int(time.time() - start)} s)"
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    def pack(*_):
        with tarfile.open(os.path.join(out_dir, "results.tgz"), "w:gz") as t:
            t.add(R, arcname=".")
        if _:
            sys.exit(1)

    signal.signal(signal.SIGTERM, pack)
    env0 = dict(os.environ, **NCCL_ENV, R=R, X=X)
    smi = None
    try:
        say(f"suite {suite_path}: {s.get('description', '')[:200]}")
        subprocess.run("nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv; "
                       "nvidia-smi topo -m; nproc; free -g; git log -1 --format='commit %H' 2>/dev/null || true",
                       shell=True, stdout=log, stderr=subprocess.STDOUT)
        missing = [p for p in s["pending"] if not os.path.isfile(p)]
        if missing:
            say(f"pending files are not committed yet: {', '.join(missing)}")
            return 2
        found = subprocess.run("nvidia-smi -L 2>/dev/null | grep -c '^GPU'", shell=True, capture_output=True, text=True)
        have = int(found.stdout.strip() or 0)
        if have < s["gpus"]:
            say(f"this suite needs {s['gpus']} GPUs; nvidia-smi lists {have}")
            return 2
        if s.get("clock_log_ms"):
            smi = subprocess.Popen(["nvidia-smi", "--query-gpu=index,timestamp,clocks.sm,power.draw,temperature.gpu",
                                    "--format=csv,noheader", f"-lms={s['clock_log_ms']}"],
                                   stdout=open(os.path.join(R, "clocks.csv"), "w"), stderr=subprocess.STDOUT)
        sp = subprocess.run(["python3", "-c", "import site;print(site.getsitepackages()[0])"],
                            capture_output=True, text=True).stdout.strip()
        for name, cmd, env, limit in steps(s, sp):
            left = budget - (time.time() - start) - 15
            t = int(min(limit, left))
            if left < MIN_STEP_S:
                say(f"no time left for {name}")
                open(os.path.join(R, "skipped.txt"), "a").write(name + "\n")
                continue
            say(f"{name} (limit {t} s): {cmd}")
            with open(os.path.join(R, f"{name}.txt"), "w") as console:
                rc = subprocess.run(["timeout", "-k", "10", str(t), "bash", "-c", cmd], env=dict(env0, **env),
                                    stdout=console, stderr=subprocess.STDOUT).returncode
            say(f"{name}: exit {rc}")
            if name == "build" and rc != 0:
                subprocess.run(f"grep -E 'error|Error' {shlex.quote(os.path.join(R, 'build.txt'))} | head -30",
                               shell=True)
                return 1
            summary = subprocess.run(["grep", "-hE", "^half|^all:|^fit verdicts|^pick |^Kendall|failed|error",
                                      os.path.join(R, f"{name}.txt")], capture_output=True, text=True).stdout
            for line in summary.splitlines()[-6:]:
                print("   " + line, flush=True)
        say("done")
        return 0
    finally:
        if smi:
            smi.terminate()
        log.close()
        pack()


def main(argv):
    dry = "--dry-run" in argv
    args = [a for a in argv if a != "--dry-run"]
    budget = None
    if "--budget" in args:
        i = args.index("--budget")
        try:
            budget = int(args[i + 1])
        except (IndexError, ValueError):
            print("device_run: --budget takes whole seconds", file=sys.stderr)
            return 2
        del args[i:i + 2]
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: scripts/device_run.sh [--dry-run] [--budget S] SUITE.json", file=sys.stderr)
        return 2
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        s = load(args[0], root)
    except SuiteError as e:
        print(f"device_run: {e}", file=sys.stderr)
        return 2
    budget = budget or s.get("budget_s", 560)
    if dry:
        print(f"# {args[0]}: {s.get('machine', '?')}, {s['gpus']} GPU(s), budget {budget} s; results in $OUT/r")
        for p in s["pending"]:
            state = "present" if os.path.isfile(os.path.join(root, p)) else "missing: a real run refuses until it is committed"
            print(f"# pending {p} ({state})")
        for st in steps(s, "$SITE_PACKAGES"):
            print(show(*st))
        return 0
    out = os.environ.get("OUT")
    if not out:
        print("device_run: set OUT to the folder to write into (the device tool sets it)", file=sys.stderr)
        return 2
    os.chdir(root)
    return run(s, args[0], out, budget)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
