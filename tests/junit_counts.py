"""Prints "<passed> <failed>" from a pytest JUnit XML report (errors count as failed; an
unreadable report as "0 0"). The suites in tests/suites.d end with these counts.

    junit_counts.py REPORT             "<passed> <failed>"
    junit_counts.py --modules REPORT   each test module's time (its tests' setup, call and
                                       teardown), longest first: where a suite's time goes
"""

import sys
import xml.etree.ElementTree as ET

modules = sys.argv[1:2] == ["--modules"]
path = sys.argv[-1]
try:
    root = ET.parse(path).getroot()
except Exception:  # noqa: BLE001 - no report (pytest died early): nothing passed
    print("0 0")
    sys.exit()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
if modules:
    times: dict[str, float] = {}
    for case in root.iter("testcase"):
        module = case.get("classname", "?").split(".")[-1]
        times[module] = times.get(module, 0.0) + float(case.get("time", 0) or 0)
    for module, secs in sorted(times.items(), key=lambda kv: -kv[1]):
        print(f"  {secs:7.1f}s  {module}")
    sys.exit()
total = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(total - failed - skipped, failed)
