/* The sandbox ("pause") container of the real nodes' pods: holds the pod's namespaces, reaps
 * zombies, exits on SIGINT/SIGTERM. Built static with musl-gcc by runtime-image/local/build.sh,
 * as Kubernetes' own build/pause/linux/pause.c does. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
  struct sigaction term = {.sa_handler = die}, chld = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &term, NULL);
  sigaction(SIGTERM, &term, NULL);
  sigaction(SIGCHLD, &chld, NULL);
  for (;;) pause();
  return 1;
}
