/* install SRC DST: copies the agent binary into the pod's shared volume
 * (init container of the kubernetes sandbox backend). */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
	char buf[65536];
	ssize_t n;
	int in, out;
	if (argc != 3) { fprintf(stderr, "usage: install SRC DST\n"); return 2; }
	in = open(argv[1], O_RDONLY);
	out = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0555);
	if (in < 0 || out < 0) { perror("install: open"); return 1; }
	while ((n = read(in, buf, sizeof buf)) > 0)
		if (write(out, buf, n) != n) { perror("install: write"); return 1; }
	if (n < 0 || close(out) != 0) { perror("install"); return 1; }
	return 0;
}
