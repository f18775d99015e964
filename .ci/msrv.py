#!/usr/bin/env python3
"""Checks that each workspace crate's declared rust-version is one its locked
dependencies accept: for every crate, the newest rust-version among the
packages its build needs (normal dependencies, all features, on Linux; for
a crate that is never published, which only builds tests and examples, its
dev-dependencies too) must not exceed the crate's own. Prints what each crate needs and fails if a
declaration is too low."""
import json
import subprocess
import sys

TARGET = "x86_64-unknown-linux-gnu"


def version(text):
    parts = [int(part) for part in text.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))


def main():
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--locked"]))
    declared = {}
    needs = {}
    for package in meta["packages"]:
        needs[(package["name"], package["version"])] = package.get("rust_version")
    members = set(meta["workspace_members"])
    failed = False
    for package in meta["packages"]:
        if package["id"] not in members:
            continue
        name = package["name"]
        own = package.get("rust_version")
        if own is None:
            print(f"{name}: declares no rust-version")
            failed = True
            continue
        declared[name] = own
        edges = "normal,dev" if package.get("publish") == [] else "normal"
        tree = subprocess.check_output(
            ["cargo", "tree", "--locked", "-p", name, "--all-features",
             "-e", edges, "--target", TARGET, "--prefix", "none"],
            text=True)
        newest = ("0", None)
        for line in tree.splitlines():
            words = line.split()
            if len(words) < 2 or not words[1].startswith("v"):
                continue
            if words[0] == name:
                continue
            wanted = needs.get((words[0], words[1][1:]))
            if wanted and version(wanted) > version(newest[0]):
                newest = (wanted, f"{words[0]} {words[1]}")
        verdict = "ok"
        if newest[1] and version(newest[0]) > version(own):
            verdict = "TOO LOW"
            failed = True
        print(f"{name}: declares {own}; its dependencies need {newest[0]}"
              f" ({newest[1] or 'none state one'}): {verdict}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
