#!/usr/bin/env python3
"""Open an image tarball as `docker load` and `ctr images import` would, and
check it against the config its Dockerfile promises.

Reads the docker-archive manifest.json that both `docker save` and crane write,
so it needs neither a daemon nor crane. Verifies every layer against the
config's diff_ids, unpacks the layers into ROOTFS for the caller to run the
binary, and prints one line per check: "ok: ..." or "FAIL: ...". Exit status
1 only when the tarball cannot be read at all; failed checks are reported in
the output, not the status, so the caller can carry on and tally them.

usage: image_tar.py TARBALL --expect CONFIG.json --tag REPO:TAG --binary PATH
                    --rootfs DIR --max-bytes N [--runtime FILE]
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tarfile

# No __pycache__ left in the work tree by the import below.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


# check-image.sh counts the `ok: ...` and `FAIL: ...` lines this prints.
say = common.Checks(verbose=True).check


def norm_tag(tag):
    # Both tools write the short form, but an image re-saved from a daemon may
    # carry the registry that Docker Hub's short names imply.
    for prefix in ("docker.io/", "index.docker.io/"):
        if tag.startswith(prefix):
            tag = tag[len(prefix):]
    return tag


def layer_stream(raw):
    """Uncompressed bytes of a layer blob (docker save: plain tar; crane: gzip)."""
    if raw[:2] == b"\x1f\x8b":
        return gzip.decompress(raw)
    if raw[:4] == b"\x28\xb5\x2f\xfd":
        raise ValueError("zstd-compressed layer: not supported by this check")
    return raw


def apply_layer(data, rootfs, headers):
    """Unpack one layer onto rootfs, honouring whiteouts, and keep its headers
    (owner and mode as the image says, whoever runs this check)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as layer:
        members = []
        for m in layer.getmembers():
            name = os.path.normpath(m.name.lstrip("/"))
            if name == "." or name.startswith(".."):
                continue
            base, leaf = os.path.split(name)
            if leaf == ".wh..wh..opq":
                target = os.path.join(rootfs, base)
                for child in os.listdir(target) if os.path.isdir(target) else []:
                    shutil.rmtree(os.path.join(target, child), ignore_errors=True)
                headers = {k: v for k, v in headers.items() if not k.startswith(base + "/")}
                continue
            if leaf.startswith(".wh."):
                gone = os.path.join(base, leaf[4:])
                path = os.path.join(rootfs, gone)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                elif os.path.lexists(path):
                    os.remove(path)
                headers = {k: v for k, v in headers.items() if k != gone and not k.startswith(gone + "/")}
                continue
            m.name = name
            headers[name] = m
            members.append(m)
        # The 'tar' filter (Python >= 3.11.4) refuses members that would land
        # outside rootfs; an image is untrusted input here.
        kwargs = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
        layer.extractall(rootfs, members=members, numeric_owner=True, **kwargs)
    return headers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tarball")
    ap.add_argument("--expect", required=True)
    ap.add_argument("--tag", required=True)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--rootfs", required=True)
    ap.add_argument("--max-bytes", type=int, required=True)
    ap.add_argument("--runtime", help="write the image's User, WorkingDir, then Env here, one per line")
    opts = ap.parse_args()
    with open(opts.expect, encoding="utf-8") as f:
        expect = json.load(f)

    try:
        archive = tarfile.open(opts.tarball, mode="r:")
        names = set(archive.getnames())

        def blob(name):
            return archive.extractfile(name).read()

        if "manifest.json" not in names:
            sys.exit("%s: no manifest.json: not a docker-archive image tarball" % opts.tarball)
        manifests = json.loads(blob("manifest.json"))
    except (OSError, tarfile.TarError, ValueError, KeyError) as e:
        sys.exit("%s: cannot read: %s" % (opts.tarball, e))

    say(len(manifests) == 1, "tarball holds one image (%d)" % len(manifests))
    entry = manifests[0]
    tags = [norm_tag(t) for t in entry.get("RepoTags") or []]
    say(opts.tag in tags, "tagged %s (tags: %s)" % (opts.tag, ", ".join(tags) or "none"))
    if "index.json" in names:
        say(True, "OCI index.json present too")

    config_file = json.loads(blob(entry["Config"]))
    cfg = config_file.get("config") or {}
    platform = "%s/%s" % (config_file.get("os"), config_file.get("architecture"))
    say(platform == "linux/amd64", "platform is linux/amd64 (%s)" % platform)

    user = cfg.get("User") or ""
    m = re.fullmatch(r"(\d+):(\d+)", user)
    say(bool(m) and m.group(1) != "0" and m.group(2) != "0",
        "user is a numeric non-root UID:GID (%r)" % user)
    say(user == "65532:65532", "user is 65532:65532 (%r)" % user)
    entrypoint = cfg.get("Entrypoint") or []
    say(entrypoint == [opts.binary], "entrypoint is [%s] (%s)" % (opts.binary, json.dumps(entrypoint)))

    # The rest must be what the Dockerfile says, whichever builder made it.
    got = {
        "Env": cfg.get("Env") or [],
        "WorkingDir": cfg.get("WorkingDir") or "/",
        "ExposedPorts": cfg.get("ExposedPorts") or {},
        "Labels": cfg.get("Labels") or {},
        "Cmd": cfg.get("Cmd") or None,
    }
    for key in sorted(got):
        want = expect.get(key)
        if key == "Cmd":
            want = want or None
        if got[key] == want:
            say(True, "%s matches the Dockerfile" % key)
            continue
        detail = "image %s, Dockerfile %s" % (json.dumps(got[key], sort_keys=True), json.dumps(want, sort_keys=True))
        if key == "Labels":
            diff = {k for k in set(got[key]) | set(want) if got[key].get(k) != want.get(k)}
            detail = "; ".join("%s: image %r, Dockerfile %r" % (k, got[key].get(k), want.get(k)) for k in sorted(diff))
            if diff == {"org.opencontainers.image.revision"}:
                detail += " (stale image: rebuild it)"
        say(False, "%s matches the Dockerfile: %s" % (key, detail))
    if opts.runtime:
        with open(opts.runtime, "w", encoding="utf-8") as f:
            f.write("".join(v + "\n" for v in [user, got["WorkingDir"]] + got["Env"]))

    diff_ids = (config_file.get("rootfs") or {}).get("diff_ids") or []
    layers = entry.get("Layers") or []
    say(len(layers) == len(diff_ids) and layers, "%d layer(s), one diff_id each" % len(layers))
    os.makedirs(opts.rootfs, exist_ok=True)
    headers, unpacked, intact = {}, 0, len(layers) == len(diff_ids)
    for i, name in enumerate(layers):
        try:
            data = layer_stream(blob(name))
        except (KeyError, ValueError, OSError, EOFError) as e:
            intact = say(False, "layer %s readable: %s" % (name, e))
            continue
        unpacked += len(data)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if i < len(diff_ids) and digest != diff_ids[i]:
            intact = say(False, "layer %d matches its diff_id (%s != %s)" % (i, digest, diff_ids[i]))
        headers = apply_layer(data, opts.rootfs, headers)
    say(intact, "layer contents match the config's diff_ids")

    size = sum(m.size for m in headers.values() if m.isfile())
    tar_size = os.path.getsize(opts.tarball)
    say(size < opts.max_bytes,
        "image content %.1f MiB < %.0f MiB (tarball %.1f MiB, layers %.1f MiB uncompressed)"
        % (size / 2**20, opts.max_bytes / 2**20, tar_size / 2**20, unpacked / 2**20))

    rel = opts.binary.lstrip("/")
    m = headers.get(rel)
    if not say(m is not None and m.isfile(), "%s is a regular file in the image" % opts.binary):
        return
    say(m.mode & 0o111 == 0o111, "%s is executable by everyone (mode %04o)" % (opts.binary, m.mode & 0o7777))
    # Owned by root and not writable by the run-time user, so a compromised
    # process cannot replace its own binary.
    say(m.uid == 0 and m.gid == 0 and m.mode & 0o022 == 0,
        "%s is root-owned, not group/other-writable (%d:%d %04o)" % (opts.binary, m.uid, m.gid, m.mode & 0o7777))

    def db_has(path, field, value):
        try:
            with open(os.path.join(opts.rootfs, path), encoding="utf-8") as f:
                return any(line.split(":")[field] == value for line in f if line.count(":") >= 2)
        except OSError:
            return False

    if re.fullmatch(r"\d+:\d+", user):
        uid, gid = user.split(":")
        say(db_has("etc/passwd", 2, uid), "/etc/passwd names UID %s" % uid)
        say(db_has("etc/group", 2, gid), "/etc/group names GID %s" % gid)


if __name__ == "__main__":
    main()
