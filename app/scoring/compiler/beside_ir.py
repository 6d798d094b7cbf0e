"""LLVM IR text for the beside worker (app.scoring.beside): a thread that lives in native code,
so that neither waking it nor handing it a scoring call needs the GIL.

The caller and the worker share a mailbox, int64 [MAILBOX_SLOTS]:
- JOB: IDLE, POSTED (a call is waiting), RUNNING (the worker took it), DONE, TAKEN_BACK (the
  caller took it back to run itself); POSTED leaves by compare-and-swap, so exactly one side
  runs a call;
- FN and the six ARGS: the call, `void fn(ptr, ptr, i64, ptr, ptr, ptr)` (the compiled
  scorer's entry);
- WORKER: ASLEEP (blocked in `read` on the wake pipe), SPINNING (polling JOB), QUIT_SPIN (the
  caller asks it to sleep again);
- ELAPSED: nanoseconds the worker's last call took;
- STOPPED: set (never cleared) to end the worker, which reads it each time it wakes. A slot of
  its own, since the worker overwrites WORKER as it goes to sleep.

Libc's `read`, `sched_yield` and `clock_gettime` come in as addresses, so the object needs no
relocations (as the scorer's code). While spinning, the worker yields the CPU every
YIELD_EVERY polls: should the scheduler have put it on the caller's CPU, the caller runs.
"""

from __future__ import annotations

JOB, FN, ARGS, WORKER, ELAPSED, STOPPED = 0, 1, 2, 8, 9, 10
MAILBOX_SLOTS = 11
IDLE, POSTED, RUNNING, DONE, TAKEN_BACK = 0, 1, 2, 3, 4
ASLEEP, SPINNING, QUIT_SPIN = 0, 1, 2
YIELD_EVERY = 64  # polls between two sched_yield calls (and clock reads)
CLOCK_MONOTONIC = 1  # Linux's clockid_t

SERVE, POST, TAKE_BACK, WAIT = "beside_serve", "beside_post", "beside_take_back", "beside_wait"


def _pause(machine: str) -> tuple[str, str]:
    """(declaration, call) of the CPU's spin-wait hint, or nothing where it has none."""
    if machine in ("x86_64", "amd64", "AMD64"):
        return "declare void @llvm.x86.sse2.pause()", "call void @llvm.x86.sse2.pause()"
    if machine in ("aarch64", "arm64"):
        return "declare void @llvm.aarch64.hint(i32)", "call void @llvm.aarch64.hint(i32 1)"
    return "", ""


def _now(name: str) -> str:
    """Monotonic nanoseconds into `%name` (clock_gettime through %clock into %ts)."""
    return f"""  %{name}.rc = call i32 %clock(i32 {CLOCK_MONOTONIC}, ptr %ts)
  %{name}.s = load i64, ptr %ts, align 8
  %{name}.np = getelementptr inbounds i64, ptr %ts, i64 1
  %{name}.ns = load i64, ptr %{name}.np, align 8
  %{name}.sns = mul i64 %{name}.s, 1000000000
  %{name} = add i64 %{name}.sns, %{name}.ns"""


def _tick(otherwise: str) -> str:
    """Counts polls in %i1 (from %i); every YIELD_EVERY-th goes to %yield_now."""
    return f"""  %i1 = add i64 %i, 1
  %m = and i64 %i1, {YIELD_EVERY - 1}
  %tick = icmp eq i64 %m, 0
  br i1 %tick, label %yield_now, label %{otherwise}"""


def _slot(name: str, index: int) -> str:
    return f"  %{name} = getelementptr inbounds i64, ptr %box, i64 {index}"


def beside_ir(machine: str) -> str:
    """The module: serve (the worker's whole life), post, take_back and wait."""
    declare, pause = _pause(machine)
    loads = "\n".join(
        f"{_slot(f'a{i}p', ARGS + i)}\n  %a{i} = load {'i64' if i == 2 else 'ptr'}, ptr %a{i}p"
        for i in range(6)
    )
    stores = "\n".join(f"{_slot(f'p{i}', FN + i)}\n  store i64 %v{i}, ptr %p{i}" for i in range(7))
    params = ", ".join(f"i64 %v{i}" for i in range(7))
    return f"""{declare}

; Blocks on the wake pipe; once woken polls JOB until a call is posted (runs it), QUIT_SPIN or
; spin_ns pass (sleeps again); returns once woken with STOPPED set, or at the pipe's end.
define void @{SERVE}(ptr %box, i64 %spin_ns, ptr %read, i32 %fd, ptr %yield, ptr %clock) {{
entry:
  %ts = alloca [2 x i64], align 8
  %buf = alloca [64 x i8], align 8
{_slot("worker", WORKER)}
{_slot("elapsed", ELAPSED)}
{_slot("stopped", STOPPED)}
  br label %sleep
sleep:
  store atomic i64 {ASLEEP}, ptr %worker release, align 8
  %n = call i64 %read(i32 %fd, ptr %buf, i64 64)
  %eof = icmp eq i64 %n, 0
  br i1 %eof, label %out, label %woken
woken:
  %stop = load atomic i64, ptr %stopped acquire, align 8
  %stopping = icmp ne i64 %stop, 0
  br i1 %stopping, label %out, label %start
start:
  store atomic i64 {SPINNING}, ptr %worker release, align 8
{_now("t0")}
  %deadline = add i64 %t0, %spin_ns
  br label %poll
poll:
  %i = phi i64 [0, %start], [%i1, %hint], [%i1, %on], [%i, %claim]
  %job = load atomic i64, ptr %box acquire, align 8
  %posted = icmp eq i64 %job, {POSTED}
  br i1 %posted, label %claim, label %nojob
claim:
  %cas = cmpxchg ptr %box, i64 {POSTED}, i64 {RUNNING} acq_rel acquire
  %won = extractvalue {{ i64, i1 }} %cas, 1
  br i1 %won, label %run, label %poll
run:
{_slot("fnp", FN)}
  %fn = load ptr, ptr %fnp
{loads}
{_now("t1")}
  call void %fn(ptr %a0, ptr %a1, i64 %a2, ptr %a3, ptr %a4, ptr %a5)
{_now("t2")}
  %took = sub i64 %t2, %t1
  store i64 %took, ptr %elapsed, align 8
  store atomic i64 {DONE}, ptr %box release, align 8
  br label %sleep
nojob:
  %st2 = load atomic i64, ptr %worker monotonic, align 8
  %quit = icmp eq i64 %st2, {QUIT_SPIN}
  br i1 %quit, label %sleep, label %count
count:
{_tick("hint")}
hint:
  {pause}
  br label %poll
yield_now:
  %y = call i32 %yield()
{_now("t3")}
  %late = icmp sge i64 %t3, %deadline
  br i1 %late, label %sleep, label %on
on:
  br label %poll
out:
  ret void
}}

; Writes the call, then JOB = POSTED (release: the worker sees the call once it sees POSTED).
define void @{POST}(ptr %box, {params}) {{
entry:
{stores}
  store atomic i64 {POSTED}, ptr %box release, align 8
  ret void
}}

; 1 if the call was still waiting (now TAKEN_BACK: the caller runs it), else 0.
define i64 @{TAKE_BACK}(ptr %box) {{
entry:
  %cas = cmpxchg ptr %box, i64 {POSTED}, i64 {TAKEN_BACK} acq_rel acquire
  %won = extractvalue {{ i64, i1 }} %cas, 1
  %r = zext i1 %won to i64
  ret i64 %r
}}

; Polls until JOB = DONE, yielding the CPU now and then (the worker may share it).
define void @{WAIT}(ptr %box, ptr %yield) {{
entry:
  br label %poll
poll:
  %i = phi i64 [0, %entry], [%i1, %next]
  %job = load atomic i64, ptr %box acquire, align 8
  %done = icmp eq i64 %job, {DONE}
  br i1 %done, label %out, label %count
count:
  {pause}
{_tick("next")}
yield_now:
  %y = call i32 %yield()
  br label %next
next:
  br label %poll
out:
  ret void
}}
"""
