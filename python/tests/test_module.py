"""The installed wheel from Python: the module's functions and the console script.

python/tests/test_wheel.sh runs this in a fresh virtual environment holding only the built
wheel, from the repository's root (the plans are read from examples/ and tests/bad/), with
the standard library's unittest (the environment has nothing else).
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import planc

GPT3 = "examples/gpt3-175b.tp"
SMALL = "examples/gpt2-124m-2gpu-dp2.tp"
HOLES = "examples/llama3-70b-solve.tp"
BROKEN = Path("tests/bad/batch-not-divisible.tp").read_text()  # P0306 at line 10
# The console script pip wrote beside the environment's interpreter.
SCRIPT = str(Path(sys.executable).with_name("planc"))


def cli(*args, **kwargs):
    return subprocess.run([SCRIPT, *args], capture_output=True, text=True, **kwargs)


class Installed(unittest.TestCase):
    def test_the_module_is_the_wheels(self):
        # Not a source tree on sys.path: the package pip installed, with libz3 beside it.
        self.assertTrue(Path(planc.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()))
        libs = Path(planc.__file__).resolve().parent.parent / "planc.libs"
        self.assertTrue(any(p.name.startswith("libz3") for p in libs.iterdir()), libs)


class Check(unittest.TestCase):
    def test_a_valid_plan(self):
        report = planc.check(GPT3)
        self.assertIs(report["ok"], True)
        self.assertEqual(report["version"], 1)
        self.assertEqual(report["plan"]["world_size"], 1024)
        self.assertGreater(report["time"]["step_s"], 0)

    def test_the_report_is_the_command_lines(self):
        printed = cli("check", GPT3, "--format", "json")
        self.assertEqual(printed.returncode, 0, printed.stderr)
        self.assertEqual(planc.check(Path(GPT3)), json.loads(printed.stdout))

    def test_a_broken_plan_as_text(self):
        report = planc.check_text(BROKEN)
        self.assertIs(report["ok"], False)
        errors = [d for d in report["diagnostics"] if d["severity"] == "error"]
        self.assertEqual([(d["code"], d["line"], d["file"]) for d in errors], [("P0306", 10, "<text>")])
        self.assertNotIn("time", report)

    def test_text_imports_relative_to_its_name(self):
        text = 'import "llama3-70b-64xh100.tp"\nparallel { tp = 4, pp = 8 }\n'
        report = planc.check_text(text, name="examples/what-if.tp")
        self.assertIs(report["ok"], True, report["diagnostics"])
        self.assertEqual((report["plan"]["tp"], report["plan"]["pp"]), (4, 8))

    def test_settings_as_a_dict_or_a_list(self):
        by_dict = planc.check("examples/llama3-8b-1x8h100.tp", set={"parallel.tp": 2})
        by_list = planc.check("examples/llama3-8b-1x8h100.tp", set=["parallel.tp=2"])
        self.assertEqual(by_dict["plan"]["tp"], 2)
        self.assertEqual(by_dict, by_list)
        bad = planc.check("examples/llama3-8b-1x8h100.tp", set={"parallel.nope": 1})
        self.assertIs(bad["ok"], False)
        self.assertEqual(bad["diagnostics"][0]["code"], "P0204")

    def test_an_unreadable_plan_raises(self):
        with self.assertRaises(FileNotFoundError) as caught:
            planc.check("examples/no-such-plan.tp")
        self.assertEqual(caught.exception.filename, "examples/no-such-plan.tp")
        with self.assertRaises(OSError):
            planc.check("examples")


class Solve(unittest.TestCase):
    def test_candidates_as_the_command_line_ranks_them(self):
        solved = planc.solve(HOLES, top=3)
        self.assertIs(solved["ok"], True)
        self.assertIs(solved["best"]["ok"], True)
        self.assertEqual([c["rank"] for c in solved["candidates"]], [1, 2, 3])
        self.assertGreater(solved["search"]["valid"], 3)
        printed = cli("solve", HOLES, "--format", "json", "--top", "3")
        self.assertEqual(printed.returncode, 0, printed.stderr)
        self.assertEqual(solved["candidates"], json.loads(printed.stdout)["candidates"])


class Simulate(unittest.TestCase):
    def test_the_step_its_timeline_and_trace(self):
        sim = planc.simulate(SMALL, svg=True, trace=True)
        self.assertIs(sim["ok"], True)
        busiest = sim["simulation"]["busiest"]
        self.assertAlmostEqual(busiest["step_s"], sim["report"]["time"]["step_s"])
        self.assertEqual(len(sim["simulation"]["ranks"]), sim["simulation"]["pipeline_ranks"])
        self.assertTrue(sim["svg"].startswith("<svg"))
        self.assertTrue(sim["trace"]["traceEvents"])

    def test_nothing_to_simulate_in_a_broken_plan(self):
        sim = planc.simulate(text=BROKEN)
        self.assertIs(sim["ok"], False)
        self.assertIsNone(sim["simulation"])
        self.assertIn("until the plan checks", sim["not_simulated"])


class Emit(unittest.TestCase):
    def test_artifacts_written_never_over_a_file(self):
        held = planc.emit(SMALL, "megatron")
        self.assertIs(held["ok"], True)
        self.assertNotIn("written", held)
        with tempfile.TemporaryDirectory() as out:
            written = planc.emit(SMALL, "megatron", out=out)
            self.assertEqual(len(written["written"]), len(held["artifacts"]))
            for artifact in held["artifacts"]:
                text = (Path(out) / artifact["path"]).read_text()
                self.assertEqual(text, artifact["contents"])
            with self.assertRaises(FileExistsError):
                planc.emit(SMALL, "megatron", out=out)
            self.assertIs(planc.emit(SMALL, "megatron", out=out, force=True)["ok"], True)

    def test_refusals(self):
        with self.assertRaises(ValueError):
            planc.emit(SMALL, "no-such-target")
        refused = planc.emit(text=BROKEN, target="megatron")
        self.assertIs(refused["ok"], False)
        self.assertEqual(refused["error"]["code"], "P0705")
        self.assertNotIn("artifacts", refused)


class ConsoleScript(unittest.TestCase):
    def test_help_and_exit_statuses(self):
        helped = cli("--help")
        self.assertEqual(helped.returncode, 0)
        self.assertIn("planc check examples/gpt3-175b.tp", helped.stdout)
        with tempfile.TemporaryDirectory() as d:
            broken = Path(d, "broken.tp")
            broken.write_text(BROKEN)
            checked = cli("check", str(broken), "--color", "never")
        self.assertEqual(checked.returncode, 1)
        self.assertIn("P0306", checked.stderr)
        self.assertEqual(cli("no-such-command").returncode, 2)

    def test_python_dash_m(self):
        shown = subprocess.run(
            [sys.executable, "-m", "planc", "--version"], capture_output=True, text=True
        )
        self.assertEqual(shown.stdout.strip(), f"planc {planc.__version__}")

    def test_a_closed_pipe_ends_quietly(self):
        # Hundreds of candidates (more than a pipe holds) into a reader that stops at once.
        shell = f'"{SCRIPT}" solve {HOLES} --format json --top 100000 | head -c 1 >/dev/null'
        piped = subprocess.run(["sh", "-c", shell], capture_output=True, text=True)
        self.assertEqual(piped.stderr, "")


if __name__ == "__main__":
    unittest.main()
