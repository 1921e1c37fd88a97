"""`gpuaas keys list|add|remove`: your SSH public keys. They reach the login hosts of every running instance you
may log in to (`gpuaas instances access`) with the access sync the service queues on each change."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..client.cli import command, emit, output_option, structured

SYNC_NOTE = "the login hosts of your running instances follow with the access sync this queued"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keys", help="your SSH public keys, for logging in to instances: list, add, remove")
    ksub = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    ls = ksub.add_parser("list", help="your SSH public keys")
    output_option(ls)
    ls.set_defaults(func=list_keys)
    add = ksub.add_parser("add", help="register an SSH public key")
    add.add_argument("name", metavar="NAME", help="a name for the key (e.g. laptop)")
    add.add_argument("file", metavar="FILE", help="the public key file (e.g. ~/.ssh/id_ed25519.pub); - reads it "
                                                  "from standard input")
    output_option(add)
    add.set_defaults(func=add_key)
    remove = ksub.add_parser("remove", help="remove an SSH public key")
    remove.add_argument("key", metavar="ID|NAME", help="the key's id, any unique start of it, or its name")
    output_option(remove)
    remove.set_defaults(func=remove_key)


def read_public_key(file: str) -> str:
    """The key file's text. A private key is refused here, before anything leaves this machine."""
    from ..client.errors import ClientError

    try:
        text = sys.stdin.read() if file == "-" else Path(file).expanduser().read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ClientError(f"{file} is not a text file: pass the public key (the .pub file)") from None
    except OSError as exc:
        raise ClientError(f"cannot read {file}: {exc.strerror}") from None
    if "PRIVATE KEY" in text:
        raise ClientError(f"{file} holds a private key: pass the public key (the .pub file); nothing was sent")
    return text.strip()


def keys_table(keys: list[dict]) -> str:
    from ..client.render import table, when

    return table(["NAME", "FINGERPRINT", "TYPE", "CREATED", "ID"],
                 [[k["name"], k["fingerprint"], k["public_key"].split()[0], when(k["created_at"]), k["id"]]
                  for k in keys])


@command("me_ssh_keys_list")
def list_keys(args, client) -> int:

    keys = client.get("/v1/me/ssh-keys")["items"]
    if structured(args):
        emit(args, keys)
    else:
        print(keys_table(keys))
    return 0


@command("me_ssh_keys_create")
def add_key(args, client) -> int:

    key = client.post("/v1/me/ssh-keys", {"name": args.name, "public_key": read_public_key(args.file)})
    if structured(args):
        emit(args, key)
    else:
        print(f"added key {key['name']} {key['fingerprint']} (id {key['id']}); {SYNC_NOTE}")
    return 0


@command("me_ssh_keys_delete")
def remove_key(args, client) -> int:
    from ..client import lookup

    key = lookup.ssh_key(client, args.key)
    client.delete(f"/v1/me/ssh-keys/{key['id']}")
    if structured(args):
        emit(args, key)
    else:
        print(f"removed key {key['name']} {key['fingerprint']} (id {key['id']}); {SYNC_NOTE}")
    return 0
