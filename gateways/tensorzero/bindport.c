/*
 * bindport.c: LD_PRELOAD shim for TensorZero's embedded HTTP gateway.
 *
 * tensorzero's Python wheel serves its Rust gateway over HTTP only through
 * `_start_http_gateway`, which always binds 127.0.0.1:0 (a port the kernel picks).
 * The study must tell every system which port to listen on, so this shim rewrites
 * the FIRST bind() of a TCP socket to 127.0.0.1:0 into $SLUICE_BIND_HOST:$SLUICE_BIND_PORT
 * (the host defaults to 127.0.0.1; a study topology may place the gateway on another address).
 * It touches nothing else: every later bind() and every socket call on the request
 * path go straight to libc, so it costs nothing per request.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static int rewritten = 0;

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    static bind_fn real_bind = NULL;
    if (!real_bind)
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");

    const char *want = getenv("SLUICE_BIND_PORT");
    if (!rewritten && want && *want && addr && addr->sa_family == AF_INET &&
        len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)addr;
        int type = 0;
        socklen_t tlen = sizeof(type);
        if (in->sin_port == 0 && in->sin_addr.s_addr == htonl(INADDR_LOOPBACK) &&
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) == 0 && type == SOCK_STREAM) {
            struct sockaddr_in fixed;
            memcpy(&fixed, in, sizeof(fixed));
            fixed.sin_port = htons((unsigned short)atoi(want));
            const char *host = getenv("SLUICE_BIND_HOST");
            if (host && *host && inet_pton(AF_INET, host, &fixed.sin_addr) != 1) {
                errno = EINVAL;
                return -1;
            }
            rewritten = 1;
            return real_bind(fd, (const struct sockaddr *)&fixed, sizeof(fixed));
        }
    }
    return real_bind(fd, addr, len);
}
