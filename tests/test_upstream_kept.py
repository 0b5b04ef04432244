"""The measure of upstream statements a refresh lost (`checks/upstream_kept.py`), on small cases of its edges.

The real upgrades are measured by `bench/upstream_kept.py` and `tests/test_end_to_end.py`; these pin the rule
that lets a re-laid-out line pass: only a run of the *same* statement's old code is not upstream's new line.
"""

from __future__ import annotations

from patch_queue.checks.upstream_kept import lost

OLD = """\
class R:
    def run(self, x):
        if x.ready and not self.config.is_encoder_decoder:
            self.step(x)
        self.log_everything_once(x)
"""


def test_a_re_laid_out_header_that_a_token_merge_dropped_a_run_of_is_not_lost() -> None:
    # upstream split the `if` header over lines and added a condition; the output (a token merge) kept the new
    # condition on omni's one-line header and dropped the run upstream only re-laid out
    new = OLD.replace(
        "        if x.ready and not self.config.is_encoder_decoder:\n",
        "        if (\n            x.ready\n            and x.fresh\n"
        "            and not self.config.is_encoder_decoder\n        ):\n",
    )
    output = OLD.replace("if x.ready and not", "if x.ready and x.fresh and not").replace("self.step", "self.omni")
    assert lost(OLD, new, output, ["R.run"], file="m.py") == []


def test_a_new_line_repeating_another_statements_code_is_lost_when_the_output_lacks_it() -> None:
    # upstream's new argument is a run of an *other* old statement's code (the `if` header's): it is upstream's
    # new line all the same, and the output that kept the old call lost it
    new = OLD.replace(
        "        self.log_everything_once(x)\n",
        "        self.log_everything_once(\n            self.config.is_encoder_decoder\n        )\n",
    )
    found = lost(OLD, new, OLD, ["R.run"], file="m.py")
    assert [(f.symbol, f.statement) for f in found] == [
        ("R.run", "self.log_everything_once(self.config.is_encoder_decoder)")
    ]
