#!/usr/bin/env python3
"""Read a wsload image Dockerfile the way `docker build` would, for the paths
that have no Docker daemon.

The Dockerfile is the one statement of an image's runtime config. The crane
path of scripts/build-image.sh turns it into `crane mutate` flags, and
scripts/check-image.sh compares a built image's config against it, so the two
build paths cannot drift apart silently.

Only what a FROM-scratch image of one static binary needs is understood:
FROM scratch, ARG, one `COPY rootfs/ /`, ENV, USER, WORKDIR, EXPOSE, LABEL,
ENTRYPOINT and CMD in exec (JSON) form. Anything else is an error, not a
silent difference between the two paths.

usage: dockerfile.py config      DOCKERFILE [--build-arg K=V]... [--rootfs DIR]
       dockerfile.py crane-args  DOCKERFILE [--build-arg K=V]... [--rootfs DIR]
config prints the expected image config as JSON; crane-args prints `crane
mutate` flags, NUL-separated, for `mapfile -d ''`.
"""

import argparse
import json
import os
import re
import sys

# BuildKit starts a FROM-scratch stage with this PATH and WorkingDir "/"
# (dockerfile2llb's emptyImage); the crane path has to start from the same.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class DockerfileError(Exception):
    pass


def logical_lines(text):
    """(line number, instruction text) with continuations joined and comments dropped."""
    out, buf, start = [], [], 0
    for no, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue  # comment lines may sit inside a continued instruction too
        if not buf:
            start = no
        if stripped.endswith("\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        out.append((start, " ".join(part for part in buf if part)))
        buf = []
    if buf:
        raise DockerfileError("line %d: continuation at end of file" % start)
    return out


def expand(word_text, env, lineno):
    """Split into words like the Dockerfile shell-lexer: quotes removed, $VAR,
    ${VAR}, ${VAR:-default} and ${VAR:+alt} substituted except in single quotes."""
    words, cur, have, i, n = [], [], False, 0, len(word_text)

    def var_at(j):
        if j + 1 < n and word_text[j + 1] == "{":
            end = word_text.find("}", j)
            if end < 0:
                raise DockerfileError("line %d: unterminated ${" % lineno)
            body = word_text[j + 2 : end]
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?::([-+])(.*))?", body)
            if not m:
                raise DockerfileError("line %d: unsupported substitution ${%s}" % (lineno, body))
            name, op, alt = m.groups()
            val = env.get(name, "")
            if op == "-":
                val = val or alt
            elif op == "+":
                val = alt if val else ""
            return val, end + 1
        m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", word_text[j + 1 :])
        if not m:
            return "$", j + 1
        return env.get(m.group(0), ""), j + 1 + m.end()

    while i < n:
        c = word_text[i]
        if c in " \t":
            if have:
                words.append("".join(cur))
                cur, have = [], False
            i += 1
        elif c == "'":
            end = word_text.find("'", i + 1)
            if end < 0:
                raise DockerfileError("line %d: unterminated quote" % lineno)
            cur.append(word_text[i + 1 : end])
            have, i = True, end + 1
        elif c == '"':
            i += 1
            while True:
                if i >= n:
                    raise DockerfileError("line %d: unterminated quote" % lineno)
                c = word_text[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\" and i + 1 < n and word_text[i + 1] in '"\\$':
                    cur.append(word_text[i + 1])
                    i += 2
                elif c == "$":
                    val, i = var_at(i)
                    cur.append(val)
                else:
                    cur.append(c)
                    i += 1
            have = True
        elif c == "\\" and i + 1 < n:
            cur.append(word_text[i + 1])
            have, i = True, i + 2
        elif c == "$":
            val, i = var_at(i)
            cur.append(val)
            have = True
        else:
            cur.append(c)
            have, i = True, i + 1
    if have:
        words.append("".join(cur))
    return words


def key_values(args, env, lineno, what):
    pairs = []
    for word in expand(args, env, lineno):
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise DockerfileError("line %d: %s wants KEY=VALUE, got %r" % (lineno, what, word))
        pairs.append((key, value))
    return pairs


def exec_form(args, lineno, what):
    try:
        value = json.loads(args)
    except ValueError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        # The shell form runs /bin/sh -c, and a scratch image has no shell.
        raise DockerfileError('line %d: %s must be in exec form (["/path", "arg"])' % (lineno, what))
    return value


def parse(path, build_args, rootfs=None):
    with open(path, encoding="utf-8") as f:
        lines = logical_lines(f.read())
    cfg = None  # set by FROM
    env_vars = {}  # ARG and ENV values visible to substitution
    env_order = []
    declared = set()  # every ARG name, for the unused-build-arg check
    copies = 0
    for lineno, line in lines:
        instr, _, args = line.partition(" ")
        instr, args = instr.upper(), args.strip()
        if instr == "ARG":
            for word in expand(args, env_vars, lineno):
                name, sep, default = word.partition("=")
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                    raise DockerfileError("line %d: bad ARG %r" % (lineno, word))
                value = build_args.get(name, default if sep else "")
                declared.add(name)
                if name not in dict(env_order):
                    env_vars[name] = value
            continue
        if instr == "FROM":
            if cfg is not None:
                raise DockerfileError("line %d: one stage only: the binary is built on the host" % lineno)
            base = expand(args, env_vars, lineno)
            if base != ["scratch"]:
                raise DockerfileError("line %d: FROM must be scratch (no base image can be pulled)" % lineno)
            # ARGs before FROM are visible to FROM only, as in Docker.
            env_vars = {}
            cfg = {"User": "", "WorkingDir": "/", "Labels": {}, "ExposedPorts": {},
                   "Entrypoint": None, "Cmd": None}
            env_order = [("PATH", DEFAULT_PATH)]
            continue
        if cfg is None:
            raise DockerfileError("line %d: %s before FROM" % (lineno, instr))
        if instr == "COPY":
            words = expand(args, env_vars, lineno)
            if words != ["rootfs/", "/"] and words != ["rootfs", "/"]:
                raise DockerfileError(
                    "line %d: the only COPY understood is `COPY rootfs/ /` (got %r): the crane "
                    "path packs that directory as the image's single layer" % (lineno, args))
            copies += 1
        elif instr == "ENV":
            words = expand(args, env_vars, lineno)
            if words and "=" not in words[0]:
                pairs = [(words[0], " ".join(words[1:]))]  # legacy `ENV KEY value`
            else:
                pairs = key_values(args, env_vars, lineno, "ENV")
            for key, value in pairs:
                # Docker replaces a variable in place, keeping the Env order.
                if any(k == key for k, _ in env_order):
                    env_order = [(k, value if k == key else v) for k, v in env_order]
                else:
                    env_order.append((key, value))
                env_vars[key] = value
        elif instr == "LABEL":
            for key, value in key_values(args, env_vars, lineno, "LABEL"):
                cfg["Labels"][key] = value
        elif instr == "USER":
            words = expand(args, env_vars, lineno)
            if len(words) != 1:
                raise DockerfileError("line %d: USER takes one word" % lineno)
            cfg["User"] = words[0]
        elif instr == "WORKDIR":
            words = expand(args, env_vars, lineno)
            if len(words) != 1:
                raise DockerfileError("line %d: WORKDIR takes one path" % lineno)
            wd = os.path.normpath(os.path.join(cfg["WorkingDir"], words[0]))
            # Docker creates a missing WORKDIR in the image; crane does not, so
            # the directory has to come from rootfs/ for the paths to agree.
            if wd != "/" and rootfs is not None and not os.path.isdir(os.path.join(rootfs, wd.lstrip("/"))):
                raise DockerfileError("line %d: WORKDIR %s is not in rootfs/" % (lineno, wd))
            cfg["WorkingDir"] = wd
        elif instr == "EXPOSE":
            for word in expand(args, env_vars, lineno):
                m = re.fullmatch(r"(\d{1,5})(?:/(tcp|udp|sctp))?", word.lower())
                if not m:
                    raise DockerfileError("line %d: EXPOSE wants PORT[/PROTO], got %r" % (lineno, word))
                cfg["ExposedPorts"]["%s/%s" % (int(m.group(1)), m.group(2) or "tcp")] = {}
        elif instr == "ENTRYPOINT":
            cfg["Entrypoint"] = exec_form(args, lineno, "ENTRYPOINT")
        elif instr == "CMD":
            cfg["Cmd"] = exec_form(args, lineno, "CMD")
        else:
            raise DockerfileError(
                "line %d: %s is not supported: the image must build the same without a Docker "
                "daemon (see scripts/build-image.sh)" % (lineno, instr))
    if cfg is None:
        raise DockerfileError("no FROM")
    if copies != 1:
        raise DockerfileError("exactly one `COPY rootfs/ /` expected, found %d" % copies)
    if not cfg["Entrypoint"]:
        raise DockerfileError("no ENTRYPOINT")
    unused = sorted(set(build_args) - set(declared))
    if unused:
        raise DockerfileError("build args not declared by an ARG: %s" % ", ".join(unused))
    cfg["Env"] = ["%s=%s" % kv for kv in env_order]
    return cfg


def crane_args(cfg):
    """`crane mutate` flags that give an empty-base image this config.

    pflag splits StringSlice values as CSV, so each element gets its own flag
    and is CSV-quoted when it holds a comma or quote. Labels are
    stringToString: with one '=' the value is taken whole (after trimming
    quotes), with more it is CSV, so quote only then.
    """
    def csv(s):
        return '"%s"' % s.replace('"', '""') if any(c in s for c in ',"\n') else s

    out = []
    for key, value in sorted(cfg["Labels"].items()):
        pair = "%s=%s" % (key, value)
        if pair.count("=") == 1:
            if pair.endswith('"') or key.startswith('"'):
                raise DockerfileError("label %s: crane cannot set a value ending in a quote" % key)
            out += ["--label", pair]
        else:
            out += ["--label", csv(pair)]
    for pair in cfg["Env"]:
        out += ["--env", pair]
    for arg in cfg["Entrypoint"]:
        out += ["--entrypoint", csv(arg)]
    for arg in cfg["Cmd"] or []:
        out += ["--cmd", csv(arg)]
    if cfg["User"]:
        out += ["--user", cfg["User"]]
    out += ["--workdir", cfg["WorkingDir"]]
    for port in sorted(cfg["ExposedPorts"]):
        out += ["--exposed-ports", port]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["config", "crane-args"])
    ap.add_argument("dockerfile")
    ap.add_argument("--build-arg", action="append", default=[], metavar="K=V")
    ap.add_argument("--rootfs")
    opts = ap.parse_args()
    build_args = {}
    for kv in opts.build_arg:
        key, sep, value = kv.partition("=")
        if not sep:
            ap.error("--build-arg wants K=V, got %r" % kv)
        build_args[key] = value
    try:
        cfg = parse(opts.dockerfile, build_args, opts.rootfs)
        if opts.mode == "config":
            json.dump(cfg, sys.stdout, indent=2, sort_keys=True)
            print()
        else:
            sys.stdout.write("".join(a + "\0" for a in crane_args(cfg)))
    except (DockerfileError, OSError) as e:
        sys.exit("%s: %s" % (opts.dockerfile, e))


if __name__ == "__main__":
    main()
