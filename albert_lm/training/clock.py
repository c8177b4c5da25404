"""The clock of a training loop, written once for pretraining, distillation and fine-tuning.

A loop makes one `LoopClock` and calls `tick(step)` after each optimizer step; the clock keeps:
- the time the run has spent (its steps, evaluations and saves; a resumed run goes on from its saved
  `elapsed_s`), agreed across ranks where the loop gives `agree`;
- with `--time-budget`, the schedule's progress over that time (`optim.time_budget_spent`) and whether it
  is spent;
- the progress bar: steps, or with a time budget the seconds of it (the step count is then only a cap);
- the pace, measured a few steps in: without a budget, how long the rest will take, said again every five
  minutes at the pace since (and once, where the loop gives `slow_advice`, what to do instead of a run of
  many hours on a CPU); with a budget, whether the
  budget leaves the warm-up at all. A budget that ends inside the warm-up never reaches its peak rate, so
  the warm-up is shortened to `warmup_fraction` of the steps the budget allows, with a warning, as
  `optim.fit_warmup` does for `--max-steps`;
- the lines said when a signal stops the run and when the budget is spent;
- what a resumed run may do to its budget: give it another length (its schedule is then the new budget's,
  as a changed --max-steps makes it the new length's), but neither take one on nor drop one.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from albert_lm.progress import progress_bar
from albert_lm.training.optim import TimeBudgetFactor, time_budget_spent
from albert_lm.values import parse_duration

logger = logging.getLogger(__name__)


class LoopClock:
    """Time, progress and pace of one training loop (see the module's docstring)."""

    WARM, MEASURED = 2, 10  # steps skipped (first-step set-up), then steps timed for the pace
    REFRESH_S = 300.0  # without a budget: the time left said again every 5 minutes, at the pace since

    def __init__(
        self,
        what: str,
        *,
        step: int,
        total_steps: int,
        elapsed_s: float = 0.0,
        budget: str | None = None,
        budget_s: float | None = None,
        scheduler: Any = None,
        warmup_fraction: float = 0.1,
        main: bool = True,
        agree: Callable[[float], float] | None = None,
        cpu: bool = True,
        slow_advice: str | None = None,
        limit: str | None = None,
    ) -> None:
        self.what, self.total_steps, self.elapsed_s = what, total_steps, elapsed_s
        self.budget, self.budget_s, self.scheduler = budget, budget_s, scheduler
        self.warmup_fraction, self.main, self.agree = warmup_fraction, main, agree
        self.cpu, self.slow_advice = cpu, slow_advice
        # what ends the run by its steps, in the warnings below (a task distillation's is its --epochs)
        self.limit = limit or f"the step limit of {total_steps} steps"
        self.start, self.mark = step, elapsed_s
        self._said: tuple[int, float] | None = None  # (step, elapsed_s) when the time left was last said
        self._advised = False  # the slow-run advice is given once
        self.bar = progress_bar(
            show=main,
            total=round(budget_s) if budget_s else total_steps,
            initial=round(elapsed_s) if budget_s else step,
            unit="s" if budget_s else "step",
            desc=what,
        )
        self._clock = time.monotonic()

    def spent(self) -> bool:
        """Whether the time budget is spent (always False without one); sets the schedule's progress."""
        if self.budget_s is not None and self.agree is not None:
            self.elapsed_s = self.agree(self.elapsed_s)
        return time_budget_spent(self.scheduler, self.elapsed_s, self.budget_s)

    def tick(self, step: int) -> bool:
        """After optimizer step `step`: count the time since the last tick, move the bar, check the pace
        once. Returns whether the time budget is spent (this was the last step)."""
        now = time.monotonic()
        self.elapsed_s, self._clock = self.elapsed_s + now - self._clock, now
        done = self.spent()
        self.bar.update(min(round(self.elapsed_s), self.bar.total) - self.bar.n if self.budget_s else 1)
        if step == self.start + self.WARM:
            self.mark = self.elapsed_s
        elif step == self.start + self.WARM + self.MEASURED:
            self._pace(step, (self.elapsed_s - self.mark) / self.MEASURED)
        elif self._said is not None and self.elapsed_s - self._said[1] >= self.REFRESH_S:
            # The pace of a long run changes (another job on the machine, evaluations): say it again.
            self._hours_left(step, (self.elapsed_s - self._said[1]) / max(step - self._said[0], 1))
        return done

    def _pace(self, step: int, per_step: float) -> None:
        if self.budget_s is None:
            self._hours_left(step, per_step)
            return
        factor = self._budget_factor()
        steps = step + int(max(0.0, self.budget_s - self.elapsed_s) / max(per_step, 1e-9))
        self._warn_step_limit_first(steps, per_step)
        if factor is None or factor.warmup_steps <= steps:
            return
        warmup = max(1, round(steps * self.warmup_fraction))
        if self.main:
            logger.warning(
                "%s: at %.2f s per step the time budget %s allows about %d steps, fewer than the warm-up of "
                "%d: the learning rate would never reach its peak; warming up over %d step%s instead (%.0f%% of "
                "the run). Set --warmup-steps to choose, or give the run more time.",
                self.what,
                per_step,
                self.budget,
                steps,
                factor.warmup_steps,
                warmup,
                "" if warmup == 1 else "s",
                100 * warmup / max(steps, 1),  # the share it is, which rounding to whole steps may change
            )
        factor.warmup_steps = warmup

    def _warn_step_limit_first(self, steps: int, per_step: float) -> None:
        """Said at once, not only at the end: a step limit that ends the run well inside its time budget (a
        recipe's budget under a --max-steps typed for a short run) leaves the budget's schedule undecayed."""
        if self.main and self.total_steps < 0.8 * steps:
            logger.warning(
                "%s: at %.2f s per step %s ends the run at about %.0f%% of the time budget %s, whose schedule "
                "the learning rate follows: it will end far from decayed. --time-budget none gives a schedule "
                "over the steps.",
                self.what, per_step, self.limit, 100 * self.total_steps / max(steps, 1), self.budget,
            )  # fmt: skip

    def _hours_left(self, step: int, per_step: float) -> None:
        self._said = (step, self.elapsed_s)
        if not self.main:
            return
        left = max(0, self.total_steps - step)
        hours = per_step * left / 3600
        logger.info(
            "%s: %.2f s per step: the %d steps left take about %s here%s",
            self.what,
            per_step,
            left,
            _hours(hours),
            busy() if self.cpu else "",
        )
        if self.cpu and hours > 2 and self.slow_advice and not self._advised:
            self._advised = True
            logger.warning(
                "at this pace the run takes about %.0f hours on this CPU. %s", hours, self.slow_advice
            )

    def _budget_factor(self) -> TimeBudgetFactor | None:
        lambdas = getattr(self.scheduler, "lr_lambdas", [None])
        return lambdas[0] if isinstance(lambdas[0], TimeBudgetFactor) else None

    def stopped(self, signum: int | None, step: int, again: str = "continue with --resume") -> None:
        """The line of a run stopped by a signal (`signum` None: a signal on another rank), with the way
        on (`again`)."""
        if self.main:
            name = signal.Signals(signum).name if signum else "a signal on another rank"
            logger.info("%s stopped by %s at step %d; %s", self.what, name, step, again)

    def finished(self, step: int) -> None:
        """At the end of the loop: the line of a spent budget, and a warning where the run ended inside its
        warm-up (a budget too short even for the shortened one, or a pace that fell after it was measured)."""
        if self.budget_s is None or not self.main:
            return
        factor = self._budget_factor()
        if self.elapsed_s < self.budget_s:  # the step limit came first
            logger.warning(
                "%s: %s ended the run at step %d, %.0f s into the time budget %s: the learning rate follows the "
                "budget's schedule, so it had not decayed (it was at %.0f%% of its peak). For a schedule over "
                "the steps, give a time budget the steps fill, or none (--time-budget none).",
                self.what,
                self.limit,
                step,
                self.elapsed_s,
                self.budget,
                100 * (factor(step) if factor is not None else 1.0),
            )
            return
        logger.info(
            "time budget %s spent at step %d (%.0f s): schedule complete", self.budget, step, self.elapsed_s
        )
        if factor is not None and step < factor.warmup_steps:
            logger.warning(
                "%s: the run ended at step %d, inside its warm-up of %d steps: the learning rate reached %.0f%% "
                "of its peak. Give it more time or set --warmup-steps below %d.",
                self.what,
                step,
                factor.warmup_steps,
                100 * step / factor.warmup_steps,
                step,
            )

    def close(self) -> None:
        self.bar.close()


def busy() -> str:
    """Where other work loads the CPUs (a load average over 1.5 x the cores this process may use): a note
    that the pace, and so any estimate from it, is the busy machine's. Else nothing."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows
        return ""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux's; macOS has the load but not this
    cores = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
    if load <= 1.5 * cores:
        return ""
    return f" (the machine is busy: load average {load:.1f} on {cores} cores; idle, it would be sooner)"


def _hours(hours: float) -> str:
    """A time left as a person says it: "40 seconds" under a minute and a half, "12 minutes" under an hour,
    else "1.5 hours"."""
    seconds = hours * 3600
    if seconds < 90:
        return f"{max(1, round(seconds))} second{'' if round(seconds) == 1 else 's'}"
    return f"{round(seconds / 60)} minutes" if hours < 1 else f"{hours:.1f} hours"


def run_length(steps: int, budget: str | None) -> str:
    """A run's length as its start line says it: "1,000 steps", or with a time budget "time budget 2m"
    (the step count is then only a cap, and not worth a line)."""
    return f"time budget {budget}" if budget else f"{steps:,} steps"


# --------------------------------------------------------------------------- a resumed run's budget
def budget_seconds(value: Any) -> float | None:
    """A time budget as a settings file holds it, in seconds; None for none (or for what is not one)."""
    try:
        return parse_duration(value) if isinstance(value, str) else None
    except ValueError:
        return None


def check_budget_kept(before: Any, now: str | None, latest: Any, new_run: str) -> None:
    """A resumed run keeps a time budget if it had one, and takes none if it had none (another length is
    taken: `say_budget_changed`): its learning rate decays over the time spent or over its steps from the
    first step, and switching mid-run would move it to another schedule at another point of its decay."""
    if before is not None and budget_seconds(before) is None:
        return  # not a budget the file could hold: the settings check names it
    if (before is None) == (now is None):
        return
    if before is not None:
        raise ValueError(
            f"--resume: the run in {latest} runs under --time-budget {before}, this one would have none: its "
            "learning rate decays over the time spent, and cannot switch to a decay over --max-steps mid-run. "
            f"Give a --time-budget (another length is taken: the rate then decays over it), or {new_run}"
        )
    raise ValueError(
        f"--resume: the run in {latest} has no time budget, this one would have --time-budget {now}: its "
        "learning rate decays over its --max-steps, and cannot switch to a decay over the time spent mid-run. "
        f"Resume without --time-budget (--max-steps may change), or {new_run}"
    )


def say_budget_changed(
    what: str,
    before: str,
    now: str,
    *,
    elapsed_s: float,
    step: int,
    scheduler: Any,
    latest: Any,
    main: bool = True,
) -> None:
    """A resumed run given another --time-budget length: refused where the run has spent that much time
    already (it would end at once and be written as a finished run), else warned (by rank 0, `main`) that
    the learning rate now decays over the new budget, with the rate it is at."""
    now_s = parse_duration(now)
    if budget_seconds(before) == now_s:
        return
    if elapsed_s >= now_s:
        raise ValueError(
            f"--resume: --time-budget {now} is spent already: the run in {latest} has trained for "
            f"{elapsed_s:.1f} s (its budget was {before}), so it would end at once and be written as finished "
            f"without training. Give a budget above {elapsed_s:.1f} s to train on, or its own {before}"
        )
    if not main:
        return
    lambdas = getattr(scheduler, "lr_lambdas", [None])
    saved = lambdas[0] if isinstance(lambdas[0], TimeBudgetFactor) else TimeBudgetFactor(0)
    factor = TimeBudgetFactor(saved.warmup_steps, saved.power)
    factor.progress = elapsed_s / now_s
    peak = float(scheduler.base_lrs[0])
    logger.warning(
        "%s: --time-budget %s (the run was for %s): the learning-rate schedule is now a %s run's; with %.1f s "
        "of it spent, at step %d the rate is %.3g (%.0f%% of the peak)",
        what,
        now,
        before,
        now,
        elapsed_s,
        step,
        peak * factor(step),
        100 * factor(step),
    )
