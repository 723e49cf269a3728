/* pause: the pod sandbox's process for the test cluster. */
#include <signal.h>
#include <unistd.h>
static void done(int s) { (void)s; _exit(0); }
int main(void) {
	signal(SIGTERM, done);
	signal(SIGINT, done);
	for (;;) pause();
}
