"""Cost profiles from Python: the library's reader and writer (dcp_cost_profile_parse/_format through
_core), so dcpack.calibrate reads what the dcpack program reads, refuses what it refuses, and says the
same thing about it."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

import dcpack
from dcpack import _core
from dcpack import calibrate as cal

from conftest import SOURCE, plan_hash_program


def _program() -> Path | None:
    plan_hash = plan_hash_program()
    program = Path(plan_hash).parent / "dcpack" if plan_hash else None
    return program if program and program.is_file() else None


# Every hostile case of the earlier reader (Unicode digits and spaces, control characters, invalid
# UTF-8, a BOM), with the message both readers give now.
HOSTILE = [
    ("quadratic = \u0665\n".encode(),
     "quadratic = '\u0665': values are non-negative integers in ASCII digits (U+0665 at column 13 is not ASCII)"),
    ("kv.\u0668 = 7\n".encode(),
     "kv.\u0668: the CP size after 'kv.' must be a power of two from 2 to 65536 (U+0668 at column 4 is not ASCII)"),
    (b"quadratic = 1\f2\n",
     "quadratic = '1\\x0c2': values are non-negative integers in ASCII digits (U+000C, a control character, "
     "at column 14: only spaces and tabs separate)"),
    (b"quadratic = 5\vkv = 3\n",
     "quadratic = '5\\x0bkv = 3': values are non-negative integers in ASCII digits (U+000B, a control character"),
    ("quadratic =\u00a05\n".encode(),
     "quadratic = '\u00a05': values are non-negative integers in ASCII digits (U+00A0 at column 12 is not ASCII)"),
    ("quadratic = \u00b2\n".encode(),
     "quadratic = '\u00b2': values are non-negative integers in ASCII digits (U+00B2 at column 13 is not ASCII)"),
    (b"# ok\nlinear = 5 # \xff\n", "2: invalid UTF-8 (byte 0xff) at column 14: a cost profile is UTF-8 text"),
    (b"\xef\xbb\xbf\xef\xbb\xbfquadratic = 1\n", "unknown key '\ufeffquadratic' (U+FEFF at column 1 is not ASCII)"),
    (b"quadratic = 1\x002\n", "a NUL byte at column 14: not a cost profile (text)"),
    (b"quadratic = 1000000000000\n",
     "quadratic = 1000000000000: one microbatch of 131072 tokens at CP 1 would cost 17179869184006443270144 units"),
    (b"quadratic = 99999999999999999999\n", "quadratic = '99999999999999999999' is above INT64_MAX"),
    (b"margin_ppm = 1000000\n", "margin_ppm = 1000000: a margin is below 1000000 parts per million"),
    (b"pipeline_schedule = gpipe\n", "pipeline_schedule = 'gpipe' is not 1f1b or interleaved"),
    (b"cp_gather.3 = 5\n", "cp_gather.3: the CP size after 'cp_gather.' must be a power of two"),
]


@pytest.mark.parametrize("data, message", HOSTILE)
def test_hostile_profiles_raise_invalid_config(tmp_path, data, message):
    path = tmp_path / "p.profile"
    path.write_bytes(data)
    with pytest.raises(dcpack.InvalidConfigError) as info:
        cal.load_profile(str(path))
    text = info.value.message
    assert message in text, text
    assert text.startswith(f"{path}:"), text
    # the text form too (the str of the same bytes, where they decode)
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        decoded = data.decode("utf-8", "surrogateescape")
    with pytest.raises(dcpack.InvalidConfigError) as again:
        cal.parse_profile(decoded, str(path))
    assert again.value.message == text


@pytest.mark.parametrize("data, message", HOSTILE)
def test_the_program_says_the_same(tmp_path, data, message):
    program = _program()
    if program is None:
        pytest.skip("the dcpack program of this build is not known (DCPACK_PLAN_HASH unset)")
    path = tmp_path / "p.profile"
    path.write_bytes(data)
    r = subprocess.run([str(program), "cost", "--profile", str(path)], capture_output=True)
    assert r.returncode == 3
    with pytest.raises(dcpack.InvalidConfigError) as info:
        cal.load_profile(str(path))
    assert r.stderr.decode("utf-8", "replace").strip() == f"dcpack cost: {info.value.message}"


def test_a_bom_and_crlf_are_accepted():
    p = cal.parse_profile(b"\xef\xbb\xbfquadratic = 3\r\nkv.2 = 4\r\n", "bom")
    assert p.cost.quadratic == 3 and p.cost.kv[1] == 4 and p.time_unit_ps is None
    # a BOM that a text reader kept as U+FEFF reads the same
    assert cal.parse_profile("\ufeffquadratic = 3\n").cost.quadratic == 3


def test_every_key_and_the_writer_round_trip(tmp_path):
    text = ("time_unit_ps = 1\nquadratic = 88\nhidden = 4096\ncp_gather = 70000\ncp_gather.2 = 75000\n"
            "small_knee = 4096\nsmall_slope = 1100\nmargin_ppm = 20000\nstep_model = dependency\n"
            "pipeline_schedule = interleaved\nforward_ppm = 400000\nfirst_stage_per_token = 5\n"
            "last_stage_per_token = 9\n")
    p = cal.parse_profile(text, "t")
    c = p.cost
    assert (c.quadratic, c.linear, c.cp_gather[1], c.cp_gather[2], c.cp_gather[16]) == (88, 49152, 75000, 70000, 70000)
    assert (c.small_knee, c.small_slope, c.margin_ppm) == (4096, 1100, 20000)
    assert (c.step_model, c.pipeline_schedule, c.forward_ppm) == ("dependency", "interleaved", 400000)
    assert (c.first_stage_per_token, c.last_stage_per_token, p.time_unit_ps) == (5, 9, 1)
    dcpack.Config(cost=c).validate()
    written = cal.format_profile(p, ["calibrated", ""])
    assert written.startswith("# calibrated\n#\ntime_unit_ps = 1\n")
    assert "\ncp_gather.65536 = 70000\n" in written and "\npipeline_schedule = interleaved\n" in written
    assert cal.parse_profile(written) == p
    path = tmp_path / "w.profile"
    cal.write_profile(str(path), p, ["x"])
    assert cal.load_profile(str(path)) == p
    # over a base model: keys not given keep the base's
    base = dataclasses.replace(dcpack.CostModel(), small_knee=777, quadratic=5)
    over = cal.parse_profile("quadratic = 6\n", "b", base)
    assert over.cost.quadratic == 6 and over.cost.small_knee == 777
    # the binding itself: bytes in, (cost dict, time unit) out
    cost, unit = _core.cost_profile_parse(b"quadratic = 2\n", "raw")
    assert cost["quadratic"] == 2 and unit == 0 and len(cost["cp_gather"]) == 17
    assert _core.cost_profile_format(cost, 0).startswith("quadratic = 2\n")


def test_the_program_reads_what_python_writes(tmp_path):
    program = _program()
    if program is None:
        pytest.skip("the dcpack program of this build is not known (DCPACK_PLAN_HASH unset)")
    p = cal.parse_profile("cp_gather.2 = 100\nsmall_knee = 4096\nsmall_slope = 11\npipeline_schedule = interleaved\n")
    path = tmp_path / "p.profile"
    cal.write_profile(str(path), p)
    out = subprocess.run([str(program), "cost", "--profile", str(path), "--format", "profile"],
                         capture_output=True, text=True, check=True).stdout
    # the program prints a header line, then the library's text: the same as Python's
    assert out.split("\n", 1)[1] == cal.format_profile(p)
