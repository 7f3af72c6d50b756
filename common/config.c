#include "common/config.h"

#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

/* Cut the line at its comment: a '#' at the start of the line or after whitespace, outside
 * double quotes. A '#' inside a word ("beta#secret", "http://h/p#frag") is part of it. */
static void cut_comment(char *line)
{
    bool quoted = false;

    for (char *p = line; *p != '\0'; p++) {
        if (*p == '"')
            quoted = !quoted;
        else if (*p == '#' && !quoted && (p == line || isspace((unsigned char)p[-1]))) {
            *p = '\0';
            return;
        }
    }
}

static rg_status_t parse_line(char *line, char *section, size_t section_len, const char *origin,
                              int lineno, rg_config_cb cb, void *arg)
{
    cut_comment(line);
    line = trim(line);
    if (*line == '\0')
        return RG_OK;
    if (*line == '[') {
        char *close = strchr(line, ']');
        if (close == NULL) {
            rg_error("%s:%d: section header without ']'", origin, lineno);
            return RG_ERR_INVALID;
        }
        *close = '\0';
        snprintf(section, section_len, "%s", trim(line + 1));
        return RG_OK;
    }
    char *eq = strchr(line, '=');
    if (eq == NULL) {
        rg_error("%s:%d: expected 'key = value'", origin, lineno);
        return RG_ERR_INVALID;
    }
    *eq = '\0';
    char *key = trim(line), *value = trim(eq + 1);
    size_t vlen = strlen(value);
    if (vlen >= 1 && value[0] == '"') {
        if (vlen < 2 || value[vlen - 1] != '"') {
            rg_error("%s:%d: value of '%s' opens a quote it does not close", origin, lineno, key);
            return RG_ERR_INVALID;
        }
        value[vlen - 1] = '\0';
        value++;
    }
    rg_status_t status = cb(arg, section, key, value);
    if (status != RG_OK && strstr(key, "token") != NULL) /* never a secret in a log */
        rg_error("%s:%d: invalid setting '%s'", origin, lineno, key);
    else if (status != RG_OK)
        rg_error("%s:%d: invalid setting '%s = %s'", origin, lineno, key, value);
    return status;
}

rg_status_t rg_config_parse_string(const char *text, const char *origin, rg_config_cb cb,
                                   void *arg)
{
    char section[128] = "";
    char *copy = strdup(text);
    rg_status_t status = RG_OK;
    int lineno = 0;

    if (copy == NULL)
        return RG_ERR_NOMEM;
    /* strtok_r skips empty lines, so count lines by hand */
    for (char *p = copy; p != NULL && status == RG_OK;) {
        char *nl = strchr(p, '\n');
        if (nl != NULL)
            *nl = '\0';
        lineno++;
        status = parse_line(p, section, sizeof(section), origin, lineno, cb, arg);
        p = nl != NULL ? nl + 1 : NULL;
    }
    free(copy);
    return status;
}

rg_status_t rg_config_parse_file(const char *path, rg_config_cb cb, void *arg)
{
    FILE *f = fopen(path, "r");
    rg_status_t status;
    char *text;
    long size;

    if (f == NULL) {
        rg_error("cannot open config file %s: %m", path);
        return RG_ERR_IO;
    }
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rg_error("cannot read config file %s: %m", path);
        fclose(f);
        return RG_ERR_IO;
    }
    text = calloc(1, (size_t)size + 1);
    if (text == NULL) {
        fclose(f);
        return RG_ERR_NOMEM;
    }
    if (fread(text, 1, (size_t)size, f) != (size_t)size) {
        rg_error("cannot read config file %s: %m", path);
        status = RG_ERR_IO;
    } else {
        status = rg_config_parse_string(text, path, cb, arg);
    }
    free(text);
    fclose(f);
    return status;
}

rg_status_t rg_split_hostport(const char *addr, char *host, size_t host_len, char *port,
                              size_t port_len, const char *default_port)
{
    const char *colon;
    size_t hlen;

    if (addr == NULL || *addr == '\0')
        return RG_ERR_INVALID;
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (close == NULL)
            return RG_ERR_INVALID;
        hlen = (size_t)(close - addr - 1);
        addr++;
        colon = close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = strrchr(addr, ':');
        hlen = colon != NULL ? (size_t)(colon - addr) : strlen(addr);
    }
    if (hlen + 1 > host_len)
        return RG_ERR_INVALID;
    memcpy(host, addr, hlen);
    host[hlen] = '\0';
    const char *p = colon != NULL ? colon + 1 : default_port;
    if (p == NULL || *p == '\0' || strlen(p) + 1 > port_len)
        return RG_ERR_INVALID;
    snprintf(port, port_len, "%s", p);
    return RG_OK;
}

bool rg_parse_size(const char *text, uint64_t *bytes_p)
{
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {{"", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
    char *end;
    unsigned long long v;

    if (text == NULL || *text < '0' || *text > '9')
        return false;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0)
        return false;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(end, units[i].suffix) == 0) {
            if (units[i].shift > 0 && v > (UINT64_MAX >> units[i].shift))
                return false;
            *bytes_p = (uint64_t)v << units[i].shift;
            return true;
        }
    }
    return false;
}
