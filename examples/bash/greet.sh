# An example function for the kruntimes Bash Runtime Server.
#
# Handler "greet.hello": function `hello` in greet.sh, relative to the registered working
# directory. The server sources this file once, at registration, in a warm bash worker;
# each invocation then calls `hello "$payload"` with the JSON input as ONE argument (data,
# never evaluated). What the function prints on stdout is the invocation's output (labelled
# application/json when it parses as JSON); stderr goes to the server's structured log; a
# non-zero exit status fails only that invocation.
#
# Plain bash, no jq: good enough for flat inputs such as {"name": "Ada"}.

# Read once, when the registration sources this file (RegisterFunction's env may set it).
GREETING=${GREETING:-Hello}

hello() {
    local input=$1 name=world
    # the "name" string field, when it is written without escape sequences
    local pattern='"name"[[:space:]]*:[[:space:]]*"([^"\\]*)"'
    if [[ $input =~ $pattern ]]; then
        name=${BASH_REMATCH[1]}
    fi
    if [[ -z $name ]]; then
        echo "hello: empty name in input" >&2
        return 2
    fi
    echo "greeting ${name}" >&2
    printf '{"message": "%s, %s!", "runtime": "bash"}\n' "$GREETING" "$name"
}
