/* The pod sandbox's process (registry.k8s.io/pause:3.10 on this machine, where
 * no image can be pulled): hold the pod's namespaces, reap zombies of the
 * shared PID namespace, exit 0 on SIGTERM or SIGINT. Built static with
 * musl-gcc by scripts/k8s/pause.sh. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
	struct sigaction q = {.sa_handler = quit}, r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
	sigaction(SIGTERM, &q, 0);
	sigaction(SIGINT, &q, 0);
	sigaction(SIGCHLD, &r, 0);
	for (;;) pause();
}
