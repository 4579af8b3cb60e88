#!/usr/bin/env bash
# Install Switchboard on Debian/Ubuntu (a machine or a container image): system packages (bubblewrap for
# the sandbox), a non-root user, a venv with the wheel, and a starter config. The Dockerfile runs it;
# docs/deploy.md describes it. Safe to run twice: what exists already is kept.
#
#   deploy/install.sh --wheel dist/switchboard_chatops-X.Y.Z-py3-none-any.whl --extras telegram,postgres
#   deploy/install.sh --check ...     print every step and check what they need; change nothing
#
# Options (defaults in brackets):
#   --wheel PATH         the wheel to install [switchboard-chatops from the package index]
#   --extras LIST        extras, comma separated, e.g. telegram,postgres [none]
#   --find-links DIR     look for dependency wheels here first (the Dockerfile's build stage)
#   --prefix DIR         where the venv goes: DIR/venv [/opt/switchboard]
#   --etc DIR            config folder [/etc/switchboard]
#   --state DIR          the user's home and data [/var/lib/switchboard]
#   --user NAME          the service user [switchboard]
#   --uid N              its uid and gid, fixed (images: Kubernetes' runAsNonRoot needs a number) [a system id]
#   --python PATH        the interpreter for the venv, 3.11 or newer [python3]
#   --offline            venv with --system-site-packages, pip --no-deps --no-index (tests, air-gapped)
#   --skip-system        no apt-get, no useradd, no chown: only the venv, the folders and the config
#   --container          also install tini (PID 1) and clean apt's lists (smaller image layers)
#   --check              dry run: print each step, check the preconditions, change nothing
set -euo pipefail

wheel="" extras="" find_links="" prefix=/opt/switchboard etc=/etc/switchboard state=/var/lib/switchboard
user=switchboard uid="" python=python3 offline=0 skip_system=0 container=0 check=0
APT_PACKAGES=(bubblewrap ca-certificates)

die() { echo "install.sh: $*" >&2; exit 2; }
while (($#)); do
  case "$1" in
    --wheel) wheel=${2:?--wheel needs a path}; shift ;;
    --extras) extras=${2:?--extras needs a list}; shift ;;
    --find-links) find_links=${2:?--find-links needs a folder}; shift ;;
    --prefix) prefix=${2:?--prefix needs a folder}; shift ;;
    --etc) etc=${2:?--etc needs a folder}; shift ;;
    --state) state=${2:?--state needs a folder}; shift ;;
    --user) user=${2:?--user needs a name}; shift ;;
    --uid) uid=${2:?--uid needs a number}; shift ;;
    --python) python=${2:?--python needs a path}; shift ;;
    --offline) offline=1 ;;
    --skip-system) skip_system=1 ;;
    --container) container=1 ;;
    --check) check=1 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
  shift
done

run() {  # print the step; run it unless this is a dry run
  echo "+ $*"
  if ((check == 0)); then "$@"; fi
}

# --- preconditions (checked in every mode, so --check says what a real run would trip over) ---------
if ((skip_system == 0)); then
  [[ $(id -u) -eq 0 ]] || ((check)) || die "run as root (or pass --skip-system for a venv only)"
  command -v apt-get >/dev/null || die "apt-get not found: install ${APT_PACKAGES[*]} yourself and pass --skip-system"
fi
if [[ -n $wheel && ! -f $wheel ]]; then die "no wheel at $wheel"; fi
if [[ -n $uid && ! $uid =~ ^[0-9]+$ ]]; then die "--uid must be a number, not $uid"; fi
if [[ -n $find_links && ! -d $find_links ]]; then die "no folder $find_links"; fi
need_python_pkgs=0
if ! "$python" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
  ((skip_system == 0)) || die "$python is not Python 3.11 or newer"
  need_python_pkgs=1  # Debian 12's python3 is 3.11
elif ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
  ((skip_system == 0)) || die "$python has no venv/ensurepip module (apt-get install python3-venv)"
  need_python_pkgs=1
fi

# --- system: packages and the user -----------------------------------------------------------------
if ((skip_system == 0)); then
  packages=("${APT_PACKAGES[@]}")
  ((need_python_pkgs)) && packages+=(python3 python3-venv)
  ((container)) && packages+=(tini)
  run env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  run env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}"
  if ((container)); then run rm -rf /var/lib/apt/lists/*; fi  # tini: PID 1 that reaps orphaned sandbox processes
  if id "$user" >/dev/null 2>&1; then
    echo "= user $user exists"
  else
    ids=()
    [[ -n $uid ]] && run groupadd --system --gid "$uid" "$user" && ids=(--uid "$uid" --gid "$uid")
    [[ -n $uid ]] || ids=(--user-group)
    run useradd --system --home-dir "$state" --shell /usr/sbin/nologin "${ids[@]}" "$user"
  fi
fi

# --- folders -----------------------------------------------------------------------------------------
run install -d -m 0755 "$prefix"
run install -d -m 0750 "$state" "$state/data" "$etc"
if ((skip_system == 0)); then
  run chown -R "$user:$user" "$state"
  run chown "root:$user" "$etc"
fi

# --- the venv and the package ------------------------------------------------------------------------
venv_args=() pip_args=(--quiet --disable-pip-version-check)
# --ignore-installed: a copy of the package among the system's site-packages (a developer's editable
# install) must not count as this venv's.
((offline)) && venv_args+=(--system-site-packages) && pip_args+=(--no-deps --no-index --ignore-installed)
[[ -n $find_links ]] && pip_args+=(--find-links "$find_links")
target=${wheel:-switchboard-chatops}
[[ -n $extras ]] && target="$target[$extras]"
[[ -x $prefix/venv/bin/python ]] || run "$python" -m venv "${venv_args[@]}" "$prefix/venv"
run "$prefix/venv/bin/python" -m pip install "${pip_args[@]}" "$target"

# --- a starter config (never overwrites one) ----------------------------------------------------------
if [[ -e $etc/config.yaml ]]; then
  echo "= $etc/config.yaml exists: kept"
else
  run "$prefix/venv/bin/switchboard" init --config "$etc/config.yaml"
  if ((skip_system == 0)); then
    run chown "root:$user" "$etc/config.yaml"
    run chmod 0640 "$etc/config.yaml"
  fi
fi
if ((check)); then
  echo "install.sh: --check: nothing was changed; the steps above are what a real run does"
else
  echo "install.sh: installed $("$prefix/venv/bin/switchboard" --version) in $prefix/venv"
fi
