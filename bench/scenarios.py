"""The benchmark scenarios. Each returns rows for the report; all run the real agent process
against the kubelet stand-in over real unix sockets."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from bench.support import (
    TIMEOUT,
    Bench,
    BenchAgent,
    Sample,
    context_switches,
    cpu_seconds,
    fds,
    pss_kib,
    resource_names,
    rss_kib,
    threads,
)
from tests.standin.kubelet import KubeletView
from token_resource.config.model import MAX_COUNT
from token_resource.host.control import ControlError, request
from token_resource.protocol import deviceplugin_pb2 as pb
from token_resource.protocol.deviceplugin import HEALTHY, MAX_MESSAGE_BYTES

TOKENS = 4  # per resource, unless a scenario says otherwise


@dataclass(frozen=True)
class Row:
    figure: str
    result: str
    target: str = ""
    verdict: str = ""  # "pass", "miss" or "" (no target)


@dataclass
class Section:
    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, figure: str, result: str, target: str = "", ok: bool | None = None) -> None:
        verdict = "" if ok is None else ("pass" if ok else "**miss**")
        self.rows.append(Row(figure, result, target, verdict))
        print(f"  {figure}: {result}" + (f"  [{target}: {verdict}]" if target else ""), flush=True)


@dataclass(frozen=True)
class Scale:
    """Repetitions; ``quick`` shrinks them all for a smoke run."""

    quick: bool = False

    def reps(self, full: int) -> int:
        return max(2, full // 5) if self.quick else full

    @property
    def idle_seconds(self) -> float:
        return 10.0 if self.quick else 60.0

    @property
    def reloads(self) -> int:
        return 500 if self.quick else 10_000


def ms(sample: Sample) -> str:
    return (
        f"median {sample.median * 1000:.1f} ms, p99 {sample.p99 * 1000:.1f} ms "
        f"(min {sample.low * 1000:.1f}, max {sample.high * 1000:.1f}; n={len(sample.values)})"
    )


def mib(kib: float) -> str:
    return f"{kib / 1024:.1f} MiB"


def counts_of(n: int, tokens: int = TOKENS) -> dict[str, int]:
    return dict.fromkeys(resource_names(n), tokens)


def start_and_register(
    bench: Bench, agent: BenchAgent, counts: Mapping[str, int], env: Mapping[str, str] | None = None
) -> tuple[float, float, float]:
    """Start the agent on ``counts``; returns (spawn, READY=1, all registered with a list)."""
    agent.write(counts)
    expectation = bench.kubelet.expect(counts)
    mark = len(agent.notify.assignments())
    spawned = agent.start(env)
    ready = agent.notify.arrival(agent.notify.wait_for_line("READY=1", after=mark, timeout=TIMEOUT))
    return spawned, ready, expectation.wait()


# --- start-up and memory -------------------------------------------------------------------------


@dataclass
class StartupResult:
    n: int
    ready: Sample
    registered: Sample
    rss_kib: int
    pss_kib: int
    threads: int
    fds: int
    agent_cpu: float  # CPU seconds of the agent in the last start-up
    standin_cpu: float  # CPU seconds of this process (the stand-in) meanwhile
    # The last start-up's registration phase (READY=1 → all registered): wall, agent CPU,
    # stand-in CPU.
    phase: tuple[float, float, float]


def startup(n: int, reps: int) -> StartupResult:
    ready, registered = [], []
    memory = (0, 0, 0, 0)
    agent_cpu = standin_cpu = 0.0
    phase = (0.0, 0.0, 0.0)
    for rep in range(reps):
        with Bench() as bench:
            agent = bench.agent()
            counts = counts_of(n)
            agent.write(counts)
            expectation = bench.kubelet.expect(counts)
            own_cpu = time.process_time()
            spawned = agent.start()
            ready_at = agent.notify.arrival(agent.notify.wait_for_line("READY=1", timeout=TIMEOUT))
            cpu_at_ready, own_cpu_at_ready = cpu_seconds(agent.pid), time.process_time()
            registered_at = expectation.wait()
            standin_cpu = time.process_time() - own_cpu
            agent_cpu = cpu_seconds(agent.pid)
            phase = (
                registered_at - ready_at,
                agent_cpu - cpu_at_ready,
                time.process_time() - own_cpu_at_ready,
            )
            ready.append(ready_at - spawned)
            registered.append(registered_at - spawned)
            if rep == reps - 1:
                # Let the start-up's garbage settle before reading memory.
                time.sleep(1.0)
                pid = agent.pid
                memory = (rss_kib(pid), pss_kib(pid), threads(pid), fds(pid))
            assert agent.stop() == 0, agent.log()[-2000:]
    return StartupResult(
        n, Sample.of(ready), Sample.of(registered), *memory, agent_cpu, standin_cpu, phase
    )


def startup_section(scale: Scale) -> tuple[Section, Section, dict[int, StartupResult]]:
    start = Section("Start-up (process start → READY=1 → every resource registered and listed)")
    memory = Section("Memory and threads (after start-up, all registered)")
    results: dict[int, StartupResult] = {}
    targets = {10: 0.5, 1000: 3.0}
    for n, reps in ((1, 9), (10, 9), (100, 7), (1000, 5)):
        print(f"start-up, {n} resource(s) x {scale.reps(reps)}", flush=True)
        result = results[n] = startup(n, scale.reps(reps))
        start.add(f"{n} resource(s): to READY=1", ms(result.ready))
        limit = targets.get(n)
        start.add(
            f"{n} resource(s): to all registered + first list",
            ms(result.registered),
            f"≤ {limit:g} s" if limit else "",
            result.registered.median <= limit if limit else None,
        )
        memory.add(
            f"{n} resource(s)",
            f"RSS {mib(result.rss_kib)}, PSS {mib(result.pss_kib)}, {result.threads} threads, "
            f"{result.fds} fds",
            "RSS ≤ 40 MiB" if n == 10 else "",
            result.rss_kib <= 40 * 1024 if n == 10 else None,
        )
    big, small = results[1000], results[10]
    per_resource = (big.rss_kib - small.rss_kib) / 990
    memory.add(
        "growth 10 → 1,000 resources",
        f"{per_resource:.1f} KiB per resource (RSS x{big.rss_kib / small.rss_kib:.2f} for x100)",
        "sub-linear",
        big.rss_kib < 100 * small.rss_kib,
    )
    wall, agent_cpu, standin_cpu = big.phase
    start.notes.append(
        f"At 1,000 resources the agent used {big.agent_cpu:.2f} s CPU in all; the benchmark "
        f"process (the kubelet stand-in) {big.standin_cpu:.2f} s meanwhile, on "
        f"{os.cpu_count()} cores. From READY=1 to all registered ({wall:.2f} s) the agent used "
        f"{agent_cpu:.2f} s CPU and the stand-in {standin_cpu:.2f} s: the stand-in (grpcio's "
        "synchronous client: a Register worker pool, two threads per plugin connection, one "
        "lock) is the larger cost of that phase, while READY=1 (every server up) is the "
        "agent's alone."
    )
    return start, memory, results


# --- reload --------------------------------------------------------------------------------------


def reload_latency(n: int, reps: int) -> Sample:
    counts = counts_of(n)
    target = resource_names(1)[0]
    samples = []
    with Bench() as bench:
        agent = bench.agent()
        start_and_register(bench, agent, counts)
        for rep in range(reps):
            counts[target] = TOKENS + 1 + rep % 2
            temporary = agent.config_path.with_name(".token-resource.toml.tmp")
            temporary.write_text(agent.text(counts))
            expectation = bench.kubelet.expect({target: counts[target]})
            mark = len(agent.notify.assignments())
            saved = time.monotonic()
            temporary.replace(agent.config_path)
            samples.append(expectation.wait() - saved)
            # The reload is complete (READY=1 again) before the next edit.
            agent.notify.wait_for_line("READY=1", after=mark, timeout=TIMEOUT)
        registrations = bench.kubelet.snapshot().resources[target].registrations
        assert registrations == 1, f"{target} registered {registrations} times"
        assert agent.stop() == 0
    return Sample.of(samples)


def reload_section(scale: Scale) -> tuple[Section, dict[int, Sample]]:
    section = Section("Reload (config saved by rename → the stand-in holds the new list)")
    samples: dict[int, Sample] = {}
    for n, reps in ((1, 40), (100, 40), (1000, 25)):
        print(f"reload, one count change among {n} x {scale.reps(reps)}", flush=True)
        sample = samples[n] = reload_latency(n, scale.reps(reps))
        target = n == 100
        section.add(
            f"one count change among {n}",
            ms(sample),
            "median ≤ 50 ms, p99 ≤ 200 ms" if target else "",
            (sample.median <= 0.05 and sample.p99 <= 0.2) if target else None,
        )
    section.notes.append(
        "Includes the agent's 20 ms settle delay (edits arrive in several file events)."
    )
    return section, samples


# --- kubelet restart -----------------------------------------------------------------------------


def kubelet_restarts(n: int, reps: int) -> tuple[Sample, Sample, int]:
    """(from the new kubelet.sock, from the stop) → every resource registered again and listed;
    and how many registrations there were beyond one per restart."""
    counts = counts_of(n)
    from_start, from_stop = [], []
    with Bench() as bench:
        agent = bench.agent()
        start_and_register(bench, agent, counts)
        kubelet = bench.kubelet
        for rep in range(reps):
            expectation = kubelet.expect(counts, min_registrations=rep + 2)
            stopping = time.monotonic()
            kubelet.stop()
            starting = time.monotonic()
            kubelet.start()  # wipes every socket first, as a starting kubelet does
            done = expectation.wait()
            from_start.append(done - starting)
            from_stop.append(done - stopping)
        view = kubelet.wait_for(
            lambda v: all(r.registrations >= reps + 1 for r in v.resources.values())
        )
        extra = sum(r.registrations - (reps + 1) for r in view.resources.values())
        assert agent.stop() == 0
    return Sample.of(from_start), Sample.of(from_stop), extra


def restart_section(scale: Scale) -> Section:
    section = Section(
        "Kubelet restart (new kubelet.sock → every resource registered again with its list)"
    )
    for n, reps in ((1, 30), (10, 30), (100, 20)):
        print(f"kubelet restart, {n} resource(s) x {scale.reps(reps)}", flush=True)
        from_start, from_stop, extra = kubelet_restarts(n, scale.reps(reps))
        target = n == 100
        section.add(
            f"{n} resource(s)",
            ms(from_start),
            "median ≤ 50 ms, p99 ≤ 200 ms" if target else "",
            (from_start.median <= 0.05 and from_start.p99 <= 0.2) if target else None,
        )
        section.add(
            f"{n} resource(s), from the old kubelet's stop",
            f"{ms(from_stop)}; {extra} registration(s) beyond one per restart",
        )
    section.notes.append(
        "The stand-in restarts in a few ms (stop, wipe every socket, start), so the agent's "
        "reaction to the wipe overlaps the new kubelet's start: the worst case for the agent."
    )
    return section


# --- Allocate and GetPreferredAllocation ---------------------------------------------------------


def hammer(call: Callable[[], object], callers: int, seconds: float) -> tuple[Sample, float, float]:
    """``callers`` threads call as fast as they can; (latencies, calls per second, elapsed)."""
    for _ in range(50):
        call()
    latencies: list[list[float]] = [[] for _ in range(callers)]
    barrier = threading.Barrier(callers + 1)
    deadline = [0.0]

    def caller(mine: list[float]) -> None:
        barrier.wait()
        while (begun := time.monotonic()) < deadline[0]:
            call()
            mine.append(time.monotonic() - begun)

    workers = [threading.Thread(target=caller, args=(mine,)) for mine in latencies]
    for worker in workers:
        worker.start()
    started = time.monotonic()
    deadline[0] = started + seconds
    barrier.wait()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - started
    everything = [latency for mine in latencies for latency in mine]
    return Sample.of(everything), len(everything) / elapsed, elapsed


def allocation_section(scale: Scale) -> Section:
    section = Section("Allocate and GetPreferredAllocation (the stand-in's own gRPC connection)")
    seconds = 1.5 if scale.quick else 4.0
    resource = resource_names(1)[0]
    ids = [f"token-{i}" for i in range(64)]
    with Bench() as bench:
        agent = bench.agent()
        counts = counts_of(10)
        counts[resource] = 64
        start_and_register(bench, agent, counts)
        kubelet = bench.kubelet

        def allocate() -> object:
            return kubelet.allocate(resource, ["token-3", "token-7"])

        def preferred() -> object:
            return kubelet.get_preferred_allocation(resource, ids, ["token-5"], 4)

        for name, call in (("Allocate", allocate), ("GetPreferredAllocation", preferred)):
            for callers in (1, 32):
                print(f"{name}, {callers} caller(s), {seconds:g} s", flush=True)
                cpu_before = cpu_seconds(agent.pid)
                latencies, rate, elapsed = hammer(call, callers, seconds)
                agent_cpu = cpu_seconds(agent.pid) - cpu_before
                p50, p99 = latencies.median * 1000, latencies.p99 * 1000
                section.add(
                    f"{name}, {callers} concurrent caller(s)",
                    f"p50 {p50:.2f} ms, p99 {p99:.2f} ms; {rate:,.0f} calls/s; agent CPU "
                    f"{agent_cpu / elapsed * 100:.0f}% of one core",
                )
        assert agent.stop() == 0
    section.notes.append(
        "The callers are Python threads on grpcio's synchronous client in the benchmark "
        "process, on the same 2 cores as the agent: at 32 callers the client shares the CPU, "
        "so throughput is a lower bound for the agent."
    )
    return section


# --- many reloads, idle cost ----------------------------------------------------------------------


def reloads_section(scale: Scale) -> Section:
    section = Section(
        f"Memory after {scale.reloads:,} reloads (10 resources; control socket `reload`, "
        "as `systemctl reload` does, each changing one count)"
    )
    resource = resource_names(1)[0]
    with Bench() as bench:
        agent = bench.agent()
        counts = counts_of(10)
        start_and_register(bench, agent, counts)

        def reload_many(times: int) -> float:
            started = time.monotonic()
            for i in range(times):
                counts[resource] = TOKENS + 1 + i % 2
                agent.write(counts, atomic=False)
                # "no change" when the file watcher's own reload got there first.
                request(agent.control_socket, "reload", TIMEOUT)
            return time.monotonic() - started

        reload_many(200)  # warm-up: caches, allocator arenas
        final = counts[resource]
        bench.kubelet.wait_for(lambda v: v.resources[resource].allocatable == final)
        pid = agent.pid
        before = rss_kib(pid), threads(pid), fds(pid)
        print(f"{scale.reloads:,} reloads", flush=True)
        elapsed = reload_many(scale.reloads)
        final = counts[resource]
        view = bench.kubelet.wait_for(lambda v: v.resources[resource].allocatable == final)
        after = rss_kib(pid), threads(pid), fds(pid)
        growth = after[0] - before[0]
        section.add(
            "RSS before → after",
            f"{mib(before[0])} → {mib(after[0])} ({growth:+d} KiB)",
            "growth ~0",
            growth <= 1024,
        )
        section.add("threads before → after", f"{before[1]} → {after[1]}")
        section.add("file descriptors before → after", f"{before[2]} → {after[2]}")
        section.add(
            "reload rate",
            f"{scale.reloads / elapsed:,.0f} reloads/s ({elapsed / scale.reloads * 1000:.2f} ms "
            "each, file write + control round trip included)",
        )
        registrations = view.resources[resource].registrations
        section.add("re-registrations caused", f"{registrations - 1}")
        assert agent.stop() == 0
    return section


def idle_section(scale: Scale) -> Section:
    seconds = scale.idle_seconds
    section = Section(
        f"Idle cost (10 resources registered, streams open, watchdog on, {seconds:g} s)"
    )
    with Bench() as bench:
        agent = bench.agent()
        # The shipped unit's WatchdogSec=20s: a ping every 10 s.
        start_and_register(bench, agent, counts_of(10), env={"WATCHDOG_USEC": "20000000"})
        time.sleep(2.0)  # let start-up's stragglers finish
        pid = agent.pid
        cpu, switches = cpu_seconds(pid), context_switches(pid)
        print(f"idle, {seconds:g} s", flush=True)
        time.sleep(seconds)
        used = cpu_seconds(pid) - cpu
        woken = context_switches(pid) - switches
        per_minute = used * 60 / seconds
        section.add(
            "CPU time per minute",
            f"{per_minute:.3f} s ({used:.2f} s in {seconds:g} s; /proc tick resolution 0.01 s)",
            "≤ 0.1 s",
            per_minute <= 0.1,
        )
        section.add(
            "thread wake-ups per minute",
            f"{woken * 60 / seconds:.0f} (context switches, all threads)",
        )
        assert agent.stop() == 0
    return section


# --- large counts ---------------------------------------------------------------------------------


def listing_size(count: int) -> int:
    """Serialized size of a ListAndWatchResponse with ``count`` healthy ``token-N`` devices."""
    total = 0
    health = len(HEALTHY)
    for digits in range(1, 12):
        low, high = (0 if digits == 1 else 10 ** (digits - 1)), min(count, 10**digits)
        if low >= high:
            break
        inner = 2 + len("token-") + digits + 2 + health
        total += (high - low) * (1 + _varint_length(inner) + inner)
    return total


def _varint_length(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def largest_count() -> int:
    low, high = 0, 10_000_000
    while low < high:
        middle = (low + high + 1) // 2
        if listing_size(middle) <= MAX_MESSAGE_BYTES:
            low = middle
        else:
            high = middle - 1
    return low


def refusal_of(resource: str) -> Callable[[KubeletView], bool]:
    def holds(view: KubeletView) -> bool:
        return any(resource in rejection for rejection in view.rejected)

    return holds


def _listing(count: int) -> pb.ListAndWatchResponse:
    return pb.ListAndWatchResponse(
        devices=[pb.Device(ID=f"token-{i}", health=HEALTHY) for i in range(count)]
    )


def large_section(scale: Scale) -> Section:
    section = Section("Large counts (gRPC's 4 MiB message limit at the kubelet)")
    limit = largest_count()
    # The arithmetic is checked against protobuf itself.
    for count in (MAX_COUNT, limit, limit + 1):
        assert _listing(count).ByteSize() == listing_size(count), count
    section.add(
        "largest count whose list fits in 4 MiB",
        f"{limit:,} tokens ({listing_size(limit):,} bytes; {limit + 1:,} → "
        f"{listing_size(limit + 1):,} bytes)",
    )
    section.add(
        f"the agent's bound ({MAX_COUNT:,})",
        f"list of {listing_size(MAX_COUNT):,} bytes = "
        f"{listing_size(MAX_COUNT) / MAX_MESSAGE_BYTES * 100:.0f}% of the limit",
        "below the limit",
        listing_size(MAX_COUNT) <= MAX_MESSAGE_BYTES,
    )
    with Bench() as bench:
        # The agent at its bound: served, registered and read by the stand-in.
        agent = bench.agent("at-bound")
        name = resource_names(1)[0]
        spawned, _, registered = start_and_register(bench, agent, {name: MAX_COUNT})
        section.add(
            f"agent with one resource of {MAX_COUNT:,}: start → registered + list",
            f"{(registered - spawned) * 1000:.0f} ms; the stand-in holds "
            f"{bench.kubelet.snapshot().resources[name].allocatable:,} devices",
        )
        # A reload above the bound is refused and the running list stays.
        agent.write({name: MAX_COUNT + 1})
        try:
            request(agent.control_socket, "reload", TIMEOUT)
            refused = "accepted (!)"
        except ControlError as error:
            refused = str(error)
        section.add(
            f"reload to {MAX_COUNT + 1:,}", f"refused: `{refused}`", "refused", "count" in refused
        )
        assert agent.stop() == 0
        # A start above the bound is refused with a clear error.
        over = bench.agent("over-bound")
        over.write({name: MAX_COUNT + 1})
        over.start()
        assert over.process is not None
        status = over.process.wait(TIMEOUT)
        message = over.log().strip().splitlines()[0] if over.log().strip() else "(nothing)"
        section.add(
            f"start with {MAX_COUNT + 1:,}",
            f"exit {status}: `{message}`",
            "refused",
            status == 1 and "between 0 and" in message,
        )
        # What the bound protects against: a plugin without one (the baseline) at the limit
        # and just past it, read by the stand-in's 4 MiB client.
        for count in (limit, limit + 1):
            resource = f"example.com/big{count}"
            expectation = bench.kubelet.expect({resource: count})
            plugin = bench.spawn_plugin(resource, count)
            try:
                if count == limit:
                    expectation.wait()
                    outcome = "read by the stand-in"
                else:
                    view = bench.kubelet.wait_for(refusal_of(resource), timeout=TIMEOUT)
                    outcome = next(e for e in view.rejected if resource in e)
                    outcome = "refused: " + outcome.split("desc = ")[-1][:90]
            finally:
                Bench.stop_plugins([plugin])
            section.add(f"a plugin without a bound sending {count:,}", outcome)
    return section


# --- the alternatives: one process per resource, restart to change -------------------------------


def baseline_startup(n: int, reps: int) -> tuple[Sample, int, int, int]:
    """N baseline processes spawned at once → all registered and listed; memory of the last."""
    samples = []
    memory = (0, 0, 0)
    for rep in range(reps):
        with Bench() as bench:
            counts = {f"example.com/b{i:04d}": TOKENS for i in range(n)}
            expectation = bench.kubelet.expect(counts)
            started = time.monotonic()
            plugins = [bench.spawn_plugin(name, count) for name, count in counts.items()]
            samples.append(expectation.wait() - started)
            if rep == reps - 1:
                time.sleep(1.0)
                pids = [plugin.pid for plugin in plugins]
                memory = (
                    sum(map(rss_kib, pids)),
                    sum(map(pss_kib, pids)),
                    sum(map(threads, pids)),
                )
            Bench.stop_plugins(plugins)
    return Sample.of(samples), *memory


def restart_workflow_baseline(reps: int) -> Sample:
    """Edit → restart the single-resource plugin with the new count → the stand-in sees it."""
    samples = []
    resource = "example.com/b0000"
    with Bench() as bench:
        expectation = bench.kubelet.expect({resource: TOKENS})
        plugin = bench.spawn_plugin(resource, TOKENS)
        expectation.wait()
        for rep in range(reps):
            count = TOKENS + 1 + rep % 2
            expectation = bench.kubelet.expect({resource: count}, min_registrations=rep + 2)
            edited = time.monotonic()
            Bench.stop_plugins([plugin])
            plugin = bench.spawn_plugin(resource, count)
            samples.append(expectation.wait() - edited)
        Bench.stop_plugins([plugin])
    return Sample.of(samples)


def restart_workflow_agent(n: int, reps: int) -> Sample:
    """The same workflow with the agent restarted instead of reloaded."""
    samples = []
    counts = counts_of(n)
    target = resource_names(1)[0]
    with Bench() as bench:
        agent = bench.agent()
        start_and_register(bench, agent, counts)
        for rep in range(reps):
            counts[target] = TOKENS + 1 + rep % 2
            expectation = bench.kubelet.expect(counts, min_registrations=rep + 2)
            edited = time.monotonic()
            agent.stop()
            agent.write(counts)
            agent.start()
            samples.append(expectation.wait() - edited)
        assert agent.stop() == 0
    return Sample.of(samples)


def comparison_section(
    scale: Scale, startups: Mapping[int, StartupResult], reload_one: Sample | None
) -> Section:
    section = Section("Side by side: one agent vs one single-resource plugin process per resource")
    for n, full in ((10, 5), (100, 1)):
        reps = scale.reps(full) if n == 10 else full
        print(f"baseline: {n} plugin processes x {reps}", flush=True)
        sample, rss, pss, thread_count = baseline_startup(n, reps)
        mine = startups[n]
        section.add(
            f"{n} resources: start → all registered",
            f"agent {ms(mine.registered)}; {n} processes {ms(sample)}",
        )
        section.add(
            f"{n} resources: memory",
            f"agent RSS {mib(mine.rss_kib)} / PSS {mib(mine.pss_kib)}, {mine.threads} threads; "
            f"{n} processes RSS {mib(rss)} / PSS {mib(pss)}, {thread_count} threads",
        )
    print("restart-based workflow", flush=True)
    baseline = restart_workflow_baseline(scale.reps(10))
    restarted = restart_workflow_agent(10, scale.reps(10))
    section.add(
        "edit → kubelet sees the new count, plugin process restarted",
        f"{ms(baseline)}; the resource is unallocatable meanwhile",
    )
    section.add("edit → kubelet sees the new count, agent restarted (10 resources)", ms(restarted))
    if reload_one is not None:
        section.add("edit → kubelet sees the new count, agent reload (live)", ms(reload_one))
    section.notes.append(
        "The baseline is bench/baseline_plugin.py: a ~100-line Python plugin on grpcio's "
        "synchronous server (a 10-thread pool, as such scripts use), one resource with a fixed "
        "count, Register, ListAndWatch (list once, then block), Allocate; no kubelet-restart "
        "handling and no file watching. It stands in for the typical ~250-line Go plugin; a Go "
        "binary would use less memory per process (not measured here), but the shape is the "
        "same: memory and start-up grow with the number of processes."
    )
    return section
