/* commands.h - the mhabench subcommands; main.c dispatches to these.
 * Each returns the process exit status: 0 ok, 1 a check failed, 2 usage/input error,
 * 3 inconclusive (compare, bisect). */
#ifndef MHA_HARNESS_COMMANDS_H
#define MHA_HARNESS_COMMANDS_H

/* The harness's parts show in its file names: cmd_*.c the commands (each
 * cmd_<name> maps statuses to exit codes, nothing below it does), meas_*
 * the measurement (the core every timing goes through, the Google Benchmark
 * shim), mach_* the machine's description, fmt_* the file formats (.npy,
 * result files), stats.c the statistics, check.c the verification engine,
 * util.c the shared parsing and messages. */
int cmd_list(int argc, char **argv);      /* main.c */
int cmd_info(int argc, char **argv);      /* cmd_info.c */
int cmd_verify(int argc, char **argv);    /* cmd_verify.c */
int cmd_attend(int argc, char **argv);    /* io/attend.c */
int cmd_forward(int argc, char **argv);   /* io/forward.c */
int cmd_sweep(int argc, char **argv);     /* sweep/cmd.c */
int cmd_report(int argc, char **argv);    /* sweep/report.c */
int cmd_compare(int argc, char **argv);   /* compare/cmd.c */
int cmd_bisect(int argc, char **argv);    /* cmd_bisect.c */
int cmd_tune(int argc, char **argv);      /* tune/cmd.c */
int cmd_recommend(int argc, char **argv); /* tune/recommend.c */
int cmd_profile(int argc, char **argv);   /* cmd_profile.c */
int cmd_merge(int argc, char **argv);     /* merge/cmd.c */

#endif
