"""file_set on real files in a temporary directory, run through `ansible -m` on the control node (AnsiballZ,
argument checking and output masking all real): what it creates and rewrites, owners and modes, idempotence,
check mode, diff, tags, secrets kept out of the output, and the refusals. The Slurm and MUNGE roles use it on
real hosts (tests/integration/test_slurm_lifecycle.py, the molecule scenarios)."""

import grp
import os
import pwd
import stat
import sys

import live_ansible
import pytest

SECRET = "k3y-" + "Zx9" * 30
# An unprivileged account and group every Debian has, to prove owners are set (the tests run as root).
NOBODY, NOGROUP = "nobody", "nogroup"


@pytest.fixture
def node(tmp_path):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"node ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    root = tmp_path / "root"
    root.mkdir()

    class Node:
        path = root

        def run(self, check=False, diff=False, **args):
            return self.run_printing(check=check, diff=diff, **args)[0]

        def run_printing(self, check=False, diff=False, **args):
            """(the result, what ansible printed before it)"""
            return live_ansible.run(inventory, "node", "file_set", args, check=check, diff=diff)

    return Node()


def owner_group_mode(path):
    info = os.stat(path)
    return pwd.getpwuid(info.st_uid).pw_name, grp.getgrgid(info.st_gid).gr_name, oct(stat.S_IMODE(info.st_mode))


def layout(root):
    return dict(
        directories=[{"path": str(root / "state" / "deep"), "owner": NOBODY, "group": NOGROUP, "mode": "0750",
                      "tag": "dirs"}],
        files=[{"path": str(root / "state" / "deep" / "app.conf"), "content": "a = 1\n", "mode": "0644",
                "tag": "app"},
               {"path": str(root / "key"), "secret_content": SECRET, "owner": NOBODY, "group": NOGROUP,
                "mode": "0400", "tag": "key"}])


def test_creates_everything_in_one_run_then_changes_nothing(node):
    result = node.run(**layout(node.path))
    assert result["changed"] and not result.get("failed"), result.get("msg") or result
    deep = node.path / "state" / "deep"
    assert result["changed_paths"] == [str(deep), str(deep / "app.conf"), str(node.path / "key")]
    assert result["changed_tags"] == ["app", "dirs", "key"]
    assert owner_group_mode(deep) == (NOBODY, NOGROUP, "0o750")
    assert owner_group_mode(node.path / "state") == ("root", "root", "0o755")  # a missing parent
    assert (deep / "app.conf").read_text() == "a = 1\n"
    assert owner_group_mode(deep / "app.conf") == ("root", "root", "0o644")
    assert (node.path / "key").read_text() == SECRET
    assert owner_group_mode(node.path / "key") == (NOBODY, NOGROUP, "0o400")
    assert not [p for p in deep.iterdir() if p.name.startswith(".")], "a temporary file was left behind"

    again = node.run(**layout(node.path))
    assert not again["changed"] and again["changed_paths"] == [] and again["changed_tags"] == [], again


def test_only_what_differs_changes_and_its_tag_is_reported(node):
    node.run(**layout(node.path))
    conf = node.path / "state" / "deep" / "app.conf"
    inode = conf.stat().st_ino
    os.chmod(node.path / "key", 0o644)
    args = layout(node.path)
    args["files"][0]["content"] = "a = 2\n"

    result = node.run(**args)
    assert result["changed_paths"] == [str(conf), str(node.path / "key")], result
    assert result["changed_tags"] == ["app", "key"]
    assert conf.read_text() == "a = 2\n" and conf.stat().st_ino != inode, "the file was not replaced by a rename"
    assert owner_group_mode(node.path / "key") == (NOBODY, NOGROUP, "0o400")


def test_check_mode_changes_nothing_and_diff_shows_content_and_attributes(node):
    result = node.run(check=True, diff=True, **layout(node.path))
    assert result["changed"] and result["changed_tags"] == ["app", "dirs", "key"], result
    assert not (node.path / "state").exists() and not (node.path / "key").exists()
    diff = {d["after_header"]: d for d in result["diff"]}
    assert diff[str(node.path / "state" / "deep" / "app.conf")]["after"] == "a = 1\n"
    assert diff[str(node.path / "state" / "deep")]["after"]["mode"] == "0750"

    node.run(**layout(node.path))
    os.chmod(node.path / "state" / "deep", 0o700)
    result = node.run(check=True, diff=True, **layout(node.path))
    assert result["changed_paths"] == [str(node.path / "state" / "deep")], result
    [d] = result["diff"]
    assert (d["before"]["mode"], d["after"]["mode"]) == ("0700", "0750")
    assert stat.S_IMODE((node.path / "state" / "deep").stat().st_mode) == 0o700, "check mode changed the mode"


def test_a_secret_never_appears_in_the_output(node):
    args = layout(node.path)
    printed = node.run_printing(diff=True, **args)[1]
    (node.path / "key").write_text("old secret\n")
    result, printed_again = node.run_printing(diff=True, **args)
    assert result["changed_paths"] == [str(node.path / "key")], result
    everything = str(result) + printed + printed_again
    assert SECRET not in everything and "old secret" not in everything
    [d] = result["diff"]
    assert "not shown" in d["after"] and "not shown" in d["before"]


@pytest.mark.parametrize("mutate, words", [
    (lambda root, a: a["files"][0].update(path="relative.conf"), "is not an absolute path"),
    (lambda root, a: a["files"][0].update(mode="rw-r--r--"), "is not an octal mode"),
    (lambda root, a: a["files"][0].update(path=str(root / "nowhere" / "x.conf")), "does not exist; list it"),
    (lambda root, a: a["files"][0].update(path=str(root / "link")), "is a symbolic link"),
    (lambda root, a: a["files"][0].update(path=str(root / "adir")), "is not a regular file"),
    (lambda root, a: a["directories"][0].update(path=str(root / "afile")), "exists and is not a directory"),
    (lambda root, a: a["files"][0].update(secret_content=SECRET), "mutually exclusive"),
    (lambda root, a: a["files"][0].pop("content"), "one of the following is required"),
])
def test_bad_requests_get_a_clear_error(node, mutate, words):
    (node.path / "adir").mkdir()
    (node.path / "afile").write_text("")
    (node.path / "link").symlink_to(node.path / "afile")
    args = layout(node.path)
    mutate(node.path, args)
    result = node.run(**args)
    assert result.get("failed") and words in result["msg"], result
    assert (node.path / "afile").read_text() == ""


def test_absent_removes_files_links_and_directory_trees_once_and_check_mode_only_lists_them(node):
    root = node.path
    (root / "tree" / "sub").mkdir(parents=True)
    (root / "tree" / "sub" / "data.log").write_text("log\n")
    (root / "key").write_text(SECRET)
    target = root / "kept-target"
    target.write_text("the link's target stays\n")
    (root / "link").symlink_to(target)
    paths = [str(root / name) for name in ("tree", "key", "link", "never-there")]

    checked = node.run(check=True, diff=True, absent=paths)
    assert checked["changed"] and checked["changed_paths"] == paths[:3], checked
    assert [d["before"]["state"] for d in checked["diff"]] == ["directory", "file", "link"]
    assert all(d["after"] == {"state": "absent"} for d in checked["diff"])
    assert (root / "tree" / "sub" / "data.log").exists() and (root / "key").exists() and (root / "link").is_symlink()

    removed = node.run(absent=paths)
    assert removed["changed"] and removed["changed_paths"] == paths[:3], removed
    assert not (root / "tree").exists() and not (root / "key").exists() and not (root / "link").is_symlink()
    assert target.read_text() == "the link's target stays\n"
    assert node.run(absent=paths)["changed"] is False


def test_absent_refuses_a_relative_path_and_removes_nothing(node):
    (node.path / "keep").write_text("x\n")
    result = node.run(absent=[str(node.path / "keep"), "relative/path"])
    assert result.get("failed") and "relative/path is not an absolute path" in result["msg"], result
    assert (node.path / "keep").exists() and not result["changed"]
