/*
 * LD_PRELOAD shim: sets TCP_NODELAY on every TCP socket the process accepts.
 *
 * s3s-fs 0.14.1 leaves Nagle's algorithm on for its accepted connections, so a response whose
 * headers and body go out in two writes waits for the client's delayed ACK: ~44 ms on most GETs
 * with a body (Linux's delayed-ACK timeout is 40 ms or more). That is harmless
 * for correctness tests but dominates latency and throughput figures, so benches/e2e.sh starts
 * s3s-fs with this library (scripts/servers: THADAM_S3_PRELOAD=path/to/nodelay.so).
 *
 * Build: gcc -shared -fPIC -O2 -Wall -Wextra -o nodelay.so nodelay.c -ldl
 *
 * Wraps accept(2) and accept4(2) (tokio/mio use accept4). A socket that is not TCP (a Unix
 * socket, say) makes setsockopt fail with EOPNOTSUPP/ENOPROTOOPT; that is ignored and errno is
 * restored, so the caller sees exactly what the real call returned.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);

/* Counts the sockets tuned, so that a test run can confirm that the shim was active. */
static unsigned long tuned;

static void set_nodelay(int fd) {
    int saved = errno;
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0) {
        if (__atomic_add_fetch(&tuned, 1, __ATOMIC_RELAXED) == 1 && getenv("THADAM_NODELAY_VERBOSE")) {
            fprintf(stderr, "nodelay.so: TCP_NODELAY set on the first accepted socket\n");
        }
    }
    errno = saved;
}

static accept_fn real_accept;
static accept4_fn real_accept4;

static void *next_symbol(const char *name) {
    void *sym = dlsym(RTLD_NEXT, name);
    if (sym == NULL) {
        /* No way to continue without the real call: fail loudly rather than misbehave. */
        fprintf(stderr, "nodelay.so: dlsym(RTLD_NEXT, %s) failed: %s\n", name, dlerror());
        abort();
    }
    return sym;
}

/* Resolved once at load, before any thread of the host exists: no lazy, racy lookup. */
__attribute__((constructor)) static void resolve(void) {
    real_accept = (accept_fn)next_symbol("accept");
    real_accept4 = (accept4_fn)next_symbol("accept4");
}

int accept(int sockfd, struct sockaddr *addr, socklen_t *addrlen) {
    int fd = real_accept(sockfd, addr, addrlen);
    if (fd >= 0) {
        set_nodelay(fd);
    }
    return fd;
}

int accept4(int sockfd, struct sockaddr *addr, socklen_t *addrlen, int flags) {
    int fd = real_accept4(sockfd, addr, addrlen, flags);
    if (fd >= 0) {
        set_nodelay(fd);
    }
    return fd;
}
