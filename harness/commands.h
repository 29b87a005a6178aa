/* commands.h - the mhabench subcommands; main.c dispatches to these.
 * Each returns the process exit status: 0 ok, 1 a check failed, 2 usage/input error. */
#ifndef MHA_HARNESS_COMMANDS_H
#define MHA_HARNESS_COMMANDS_H

int cmd_list(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_attend(int argc, char **argv);
int cmd_forward(int argc, char **argv);
int cmd_sweep(int argc, char **argv);     /* sweep.c */
int cmd_compare(int argc, char **argv);   /* compare.c */
int cmd_tune(int argc, char **argv);      /* tune.c */
int cmd_recommend(int argc, char **argv); /* tune.c */
int cmd_profile(int argc, char **argv);   /* profile.c */

#endif
