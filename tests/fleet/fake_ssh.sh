#!/bin/sh
# fake_ssh.sh HOST COMMAND... - ssh's calling convention without a network:
# runs COMMAND in a POSIX shell here (as sshd hands it to the login shell) and
# notes HOST and the time in $FAKE_SSH_LOG, so a test can see who ran what when.
host=$1
shift
echo "$host start $(date +%s.%N)" >>"${FAKE_SSH_LOG:-/dev/null}"
sh -c "$*"
rc=$?
echo "$host end $(date +%s.%N)" >>"${FAKE_SSH_LOG:-/dev/null}"
exit $rc
