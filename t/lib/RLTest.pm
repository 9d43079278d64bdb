package RLTest;

# A small harness for the end-to-end tests, in the style of nginx-tests'
# Test::Nginx: it writes a configuration, starts Debian's real nginx with the
# built module on a free loopback port in a temporary prefix, talks HTTP to
# it, and stops it, failing the test if the error log shows an alert, an
# emergency, a crash or a sanitizer report.  Every helper the tests share is
# here, once:
#
#   my $t = RLTest->new->start('ratelimit_zone z 1m; server { listen 127.0.0.1:%%PORT%%; ... }',
#                              workers => 2);              # the body of http {}
#   RLTest::locations('/a/' => 'ratelimit zone=z limit=1;');  # a location a rule set, serving html/
#   my $r = $t->get('/index.html', { 'X-User' => 'a' });   # HTTP::Tiny response
#   $t->request('DELETE', '/rl/zones/z/keys?key=a');       # any method
#   $t->get_as('/p/', user => 'alice');                    # X-User: alice
#   $t->statuses('/f', 3, { 'X-Key' => 'k' });            # "200 200 429"
#   my %status = $t->pipelined('/f', 'X-Key', @keys);      # one request a key, one connection
#   my @r = $t->at_once([ '/f', 'X-Key' => 'k' ], ...);    # each on its own connection, at once
#   RLTest::burst(ports => [...], ...);                    # many clients, keep-alive
#   my @results = RLTest::parallel(sub { ... }, ...);      # code in processes, results back
#   $t->stats; $t->rule_stats('z', 'rule');                # ratelimit_stats' JSON
#   $t->key_rule('z', 'alice', 'rule');                    # the key API's answer for a rule
#   $t->log_like(qr/.../, 'name');                         # a log line, once it is written
#   $t->wait_folded(qr/line/, qr/(\d+) more/, $n);        # folded log lines and their counts
#   $t->forget_kills([ $pid ]);                            # the test's own SIGKILLs, not the module's
#   $t->reload($new_body);  $t->stop();  $t->kill_server;   # SIGKILL, all of it
#
# RLTest->new(quiet => 1) makes stop() print nothing (benchmarks use it).
# RL_MODULE overrides the module (default: build/ngx_http_ratelimit_module.so):
# a .so is loaded with load_module, a .conf (a Debian modules-enabled file) is
# included, and "static" means compiled into nginx (nothing to load).
# RL_NGINX overrides the binary (default: /usr/sbin/nginx); RL_PRELOAD is
# preloaded into nginx (a sanitizer runtime); RL_KEEP=1 keeps the prefix.

use strict;
use warnings;

use Exporter qw(import);
our @EXPORT_OK = qw(statuses_of json_of basic_auth parse_response read_response wait_until read_file write_file
                    free_port spawn parallel);

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use Fcntl qw(O_CREAT O_RDONLY LOCK_EX LOCK_NB);
use File::Path qw(make_path);
use File::Spec;
use File::Temp qw(tempdir);
use HTTP::Tiny;
use IO::Select;
use IO::Socket::INET;
use JSON::PP ();
use MIME::Base64 qw(encode_base64);
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(sleep time);

my $root = abs_path(dirname(__FILE__) . '/../..');
my @running;

# ---- an nginx of the test's own ----------------------------------------------

sub new {
    my ($class, %opt) = @_;
    my $module = $ENV{RL_MODULE} // "$root/build/ngx_http_ratelimit_module.so";
    die "RLTest: $module not found: run ./build.sh first\n" unless $module eq 'static' || -f $module;

    my $prefix = tempdir('ngx-ratelimit-t-XXXXXX', TMPDIR => 1, CLEANUP => !$ENV{RL_KEEP});
    diag("prefix kept: $prefix") if $ENV{RL_KEEP};
    make_path("$prefix/html", "$prefix/tmp");
    write_file("$prefix/html/index.html", "ok\n");
    write_file("$prefix/html/f", "f\n");

    my $self = bless {
        prefix => $prefix, module => $module, nginx => $ENV{RL_NGINX} // '/usr/sbin/nginx',
        port => free_port(), pid => undef, nconf => 0, quiet => $opt{quiet},
    }, $class;
    return $self;
}

sub prefix { $_[0]{prefix} }
sub port   { $_[0]{port} }
sub module { $_[0]{module} }
sub nginx  { $_[0]{nginx} }

# The main-context line that loads the module (RL_MODULE).
sub load_line {
    my ($self) = @_;
    my $m = $self->{module};
    return '' if $m eq 'static';
    return $m =~ /\.conf$/ ? "include $m;" : "load_module $m;";
}

sub write_file {
    my ($path, $text) = @_;
    open(my $fh, '>', $path) or die "RLTest: $path: $!\n";
    print $fh $text;
    close $fh;
}

sub read_file {
    my ($path) = @_;
    open(my $fh, '<', $path) or return '';
    local $/;
    return <$fh> // '';   # a /proc file whose process left meanwhile reads nothing
}

# A loopback port for a server of the test, its own for as long as the
# test's process lives, whatever else runs at the same time (prove -j, or
# another checkout's tests): ports come from a block of 100 between 10000
# and 19999, below the kernel's ephemeral range (no connection takes its
# own port there), and a block is the process's while it holds an flock on
# the block's file in $TMPDIR/ngx-ratelimit-ports.  So a port the test
# stops listening on (a restart, a server stopped on purpose, a port where
# nothing listens) is taken by nothing else meanwhile.  A port of the block
# that something else listens on is skipped; a child process takes a block
# of its own.
my ($port_pid, @ports) = (0);
my @port_locks;

sub free_port {
    while (1) {
        take_port_block() if $port_pid != $$ || !@ports;
        my $port = shift @ports;
        return $port if port_bindable($port);
    }
}

sub take_port_block {
    my $dir = File::Spec->tmpdir . '/ngx-ratelimit-ports';
    mkdir $dir;
    chmod 01777, $dir if -o $dir;   # any user's tests take blocks there
    my $first = int(rand(100));
    for my $i (0 .. 99) {
        my $block = ($first + $i) % 100;
        sysopen(my $fh, "$dir/$block", O_RDONLY | O_CREAT, 0644) or next;
        next unless flock($fh, LOCK_EX | LOCK_NB);
        push @port_locks, $fh;   # held until the process exits
        ($port_pid, @ports) = ($$, map { 10000 + 100 * $block + $_ } 0 .. 99);
        return;
    }
    die "RLTest: no free block of ports in $dir: 100 test processes hold one\n";
}

# Whether a TCP server may listen on 127.0.0.1:$port now (as nginx and
# redis-server do, with SO_REUSEADDR).
sub port_bindable {
    my ($port) = @_;
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => $port, Proto => 'tcp', Listen => 1,
                                  ReuseAddr => 1) or return 0;
    close $s;
    return 1;
}

# The configuration write_conf would write: the module, a main context that
# works as root and in a temporary prefix, and $body inside http {}.  As
# root, workers run as root too, unless user => 'nobody nogroup' names
# their user (who must then be able to read the prefix).
sub conf_text {
    my ($self, $body, %opt) = @_;
    my $p = $self->{prefix};
    my $user = $> != 0 ? '' : 'user ' . ($opt{user} // 'root') . ";\n";
    my $workers = $opt{workers} // 1;
    my $master = $opt{master} // 'on';
    my $level = $opt{log_level} // 'notice';
    my $main = $opt{main} // '';
    my $connections = $opt{connections} // 4096;
    my $access = $opt{no_access_log} ? 'access_log off;' : "access_log $p/access.log;";
    $body =~ s/%%PORT%%/$self->{port}/g;
    $body =~ s/%%PREFIX%%/$p/g;
    my $load = $self->load_line;
    # under the sanitizers, their options pass to a new binary a binary
    # upgrade starts (nginx keeps no other variable of its own)
    my $env = $ENV{RL_PRELOAD} ? "env ASAN_OPTIONS;\nenv UBSAN_OPTIONS;\n" : '';
    return <<"EOF";
$load
$env${user}worker_processes $workers;
daemon off;
master_process $master;
pid $p/nginx.pid;
error_log $p/error.log $level;
$main
events {
    worker_connections $connections;
}

http {
    $access
    client_body_temp_path $p/tmp/body;
    proxy_temp_path $p/tmp/proxy;
    fastcgi_temp_path $p/tmp/fastcgi;
    uwsgi_temp_path $p/tmp/uwsgi;
    scgi_temp_path $p/tmp/scgi;
    root $p/html;

$body
}
EOF
}

sub write_conf {
    my ($self, $body, %opt) = @_;
    my $text = $self->conf_text($body, %opt);
    write_file("$self->{prefix}/nginx.conf", $text);
    # the workers start() waits for
    $self->{workers} = ($opt{master} // 'on') eq 'on' ? $opt{workers} // 1 : 0;
    return $text;
}

# Starts nginx (after writing the configuration, when a body for http {} and
# write_conf's options are given) and waits until it listens.
sub start {
    my ($self, $body, %opt) = @_;
    $self->write_conf($body, %opt) if defined $body;
    my $p = $self->{prefix};
    my $pid = fork() // die "RLTest: fork: $!\n";
    if ($pid == 0) {
        open(STDOUT, '>>', "$p/stderr.log");
        open(STDERR, '>&', \*STDOUT);
        $ENV{LD_PRELOAD} = $ENV{RL_PRELOAD} if $ENV{RL_PRELOAD};
        exec($self->{nginx}, '-p', "$p/", '-c', "$p/nginx.conf", '-e', "$p/error.log")
            or POSIX::_exit(127);
    }
    $self->{pid} = $pid;
    push @running, $pid;

    my $up = wait_until(sub {
        return 1 if IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $self->{port}, Proto => 'tcp');
        die "RLTest: nginx exited at start:\n" . $self->error_log . read_file("$p/stderr.log")
            if waitpid($pid, WNOHANG) == $pid;
        return 0;
    }, 10);
    die "RLTest: nginx did not listen on $self->{port}:\n" . $self->error_log unless $up;
    # the master listens before its workers run: a request, a signal or a
    # count of workers waits until each has run the module's worker start
    # (a worker that does not start is the test's to find)
    my $n = $self->{workers} // 0;
    wait_until(sub { $self->ready_workers >= $n }, 10) if $n;
    return $self;
}

# SIGQUIT, wait, and check the error log once.
sub stop {
    my ($self) = @_;
    return unless $self->{pid};
    my $pid = delete $self->{pid};
    kill 'QUIT', $pid;
    my $done = wait_until(sub { waitpid($pid, WNOHANG) == $pid }, 10);
    unless ($done) {
        kill 'KILL', $pid;
        waitpid($pid, 0);
    }
    @running = grep { $_ != $pid } @running;
    return if $self->{quiet};   # benchmarks: no test output
    ok($done, 'nginx stopped gracefully');

    my @bad = grep { /\[(alert|emerg|crit)\]|exited on signal|AddressSanitizer|LeakSanitizer|runtime error:/ }
        split /\n/, $self->error_log . read_file("$self->{prefix}/stderr.log");
    ok(!@bad, 'error log clean') or diag(join "\n", @bad);
}

sub master_pid { $_[0]{pid} }

# SIGKILL to the master and its workers at once, as a machine's crash
# would stop a server: nothing of it runs its exit.  The master is stopped
# first (SIGSTOP) and its workers read then: a master that saw a worker
# die before its own SIGKILL would start another, which nothing would stop.
sub kill_server {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return;
    kill_nginx($pid);
    @running = grep { $_ != $pid } @running;
}

# SIGKILL to a master and its workers (kill_server's), for what a test
# leaves running when it ends or dies: a worker whose master is gone would
# keep serving.
sub kill_nginx {
    my ($pid) = @_;
    kill 'STOP', $pid;
    # its state in /proc (after "(comm) "): T once stopped
    wait_until(sub { my ($state) = read_file("/proc/$pid/stat") =~ /.*\) (\S)/s; ($state // 'T') eq 'T' }, 5);
    kill 'KILL', children_of($pid), $pid;
    waitpid($pid, 0);
}

sub signal {
    my ($self, $sig) = @_;
    return kill $sig, $self->{pid};
}

sub worker_pids {
    my ($self) = @_;
    return () unless $self->{pid};
    return children_of($self->{pid});
}

sub children_of {
    my ($parent) = @_;
    my @pids;
    for my $stat (glob '/proc/[0-9]*/stat') {
        my $s = read_file($stat) or next;
        # pid (comm) state ppid ...: comm may hold spaces, so split after ')'
        my ($pid, $rest) = $s =~ /^(\d+) \(.*\) (.*)$/s or next;
        my (undef, $ppid) = split ' ', $rest;
        push @pids, $pid if $ppid == $parent;
    }
    return sort { $a <=> $b } @pids;
}

# The workers that have started: nginx names a worker "nginx: worker
# process" once its modules' worker start has run.
sub ready_workers {
    my ($self) = @_;
    return grep { read_file("/proc/$_/cmdline") =~ /^nginx: worker process/ } $self->worker_pids;
}

# Optionally rewrites the configuration, then reloads and waits until every
# worker is a new one, started.
sub reload {
    my ($self, $body, %opt) = @_;
    $self->write_conf($body, %opt) if defined $body;
    my %old = map { $_ => 1 } $self->worker_pids;
    $self->signal('HUP');
    wait_until(sub {
        my @now = $self->worker_pids;
        return @now && !grep({ $old{$_} } @now) && $self->ready_workers == @now;
    }, 10) or die "RLTest: reload did not complete:\n" . $self->error_log;
    return $self;
}

# A reload that does not wait for the old workers to exit (they may hold
# requests, or be frozen): true once the master runs $n new workers
# (within 10 s; a new worker's start may wait for a lock a frozen one
# holds).
sub reload_started {
    my ($self, $n) = @_;
    my %old = map { $_ => 1 } $self->worker_pids;
    $self->signal('HUP');
    return wait_until(sub { (grep { !$old{$_} } $self->worker_pids) >= $n }, 10);
}

# Workers killed but not yet reaped by the master.
sub zombie_workers {
    my ($self) = @_;
    return grep { ((read_file("/proc/$_/stat") =~ /^\d+ \(.*\) (\S)/s)[0] // '') eq 'Z' } $self->worker_pids;
}

# The test's own SIGKILLs of workers, which stop() would take for crashes:
# once the master has reaped them (10 s at most), the error log's lines
# about those pids ("exited on signal 9"; with locked => 1, the alert that
# the master unlocked a zone one held) are dropped.  True if every killed
# worker is reaped.
sub forget_kills {
    my ($self, $pids, %opt) = @_;
    my $reaped = wait_until(sub { !$self->zombie_workers }, 10);
    return $reaped unless @$pids;
    # the master writes each one's line after it reaps it
    wait_until(sub { my $l = $self->error_log; !grep { $l !~ /worker process $_ exited on signal 9/ } @$pids }, 5);
    my $who = join '|', @$pids;
    my $lines = $opt{locked} ? qr/worker process (?:$who) exited on signal 9|was locked by (?:$who)\b/
              : qr/worker process (?:$who) exited on signal 9/;
    my $log = $self->error_log;
    $log =~ s/^.*(?:$lines).*\n//mg;
    write_file("$self->{prefix}/error.log", $log);
    return $reaped;
}

# ---- HTTP --------------------------------------------------------------------

# Whether the nginx under test is built with SSL (redis_tls=on needs it):
# '' if it is, else why not.
sub ssl_missing {
    my $nginx = $ENV{RL_NGINX} // '/usr/sbin/nginx';
    my $v = `$nginx -V 2>&1`;
    return $v =~ /--with-http_ssl_module|built with OpenSSL/ ? '' : "$nginx is built without SSL";
}

sub url { "http://127.0.0.1:$_[0]{port}$_[1]" }

# One request on a new connection (HTTP::Tiny's response, redirects not
# followed): each request may reach any worker, and none sticks to a worker
# that a reload retired.
sub request {
    my ($self, $method, $path, $headers, $content) = @_;
    my $http = HTTP::Tiny->new(keep_alive => 0, timeout => 10, max_redirect => 0);
    return $http->request($method, $self->url($path),
                          { headers => $headers // {}, defined $content ? (content => $content) : () });
}

sub get {
    my ($self, $path, $headers) = @_;
    return $self->request('GET', $path, $headers);
}

# A GET with X- headers by name: get_as($path, user => 'alice') sends X-User.
sub get_as {
    my ($self, $path, %h) = @_;
    return $self->get($path, { map { ("X-\u$_" => $h{$_}) } keys %h });
}

# $n GETs one after another: their responses.
sub gets {
    my ($self, $path, $n, $headers) = @_;
    return map { $self->get($path, $headers) } 1 .. $n;
}

# Responses' statuses, as one string: "200 200 429".
sub statuses_of { join ' ', map { $_->{status} } @_ }

# $n GETs one after another: their statuses, as one string.
sub statuses {
    my ($self, $path, $n, $headers) = @_;
    return statuses_of($self->gets($path, $n, $headers));
}

# The Authorization header's value for "user:password".
sub basic_auth { 'Basic ' . encode_base64($_[0], '') }

sub connect {
    my ($self) = @_;
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$self->{port}") or die "RLTest: connect: $!\n";
    return $s;
}

# A new connection with one request written on it and nothing read: "GET
# $path HTTP/1.1" ("HEAD /x": another method), Host: t unless given, then
# the headers as they are (any bytes: HTTP::Tiny refuses control bytes).
sub open_request {
    my ($self, $path, $headers) = @_;
    my $method = $path =~ s/^([A-Z]+) // ? $1 : 'GET';
    my %h = (Host => 't', %{ $headers // {} });
    my $s = $self->connect;
    print $s "$method $path HTTP/1.1\r\n", map({ "$_: $h{$_}\r\n" } sort keys %h), "\r\n";
    return $s;
}

# One request written by hand (open_request) with Connection: close, its
# answer read to the end: parse_response's.
sub get_raw {
    my ($self, $path, $headers) = @_;
    return read_response($self->open_request($path, { %{ $headers // {} }, Connection => 'close' }));
}

# Bytes sent as they are on a new connection; the answer, read to the end.
sub raw {
    my ($self, $bytes) = @_;
    my $s = $self->connect;
    print $s $bytes;
    local $/;
    return scalar(<$s>) // '';
}

# A connection read to its end (at most $timeout s, 30 by default, of
# silence), parsed.
sub read_response {
    my ($s, $timeout) = @_;
    my ($buf, $sel) = ('', IO::Select->new($s));
    while ($sel->can_read($timeout // 30)) {
        sysread($s, $buf, 65536, length $buf) or last;
    }
    close $s;
    return parse_response($buf);
}

# An HTTP/1.x response's bytes: { status (0 if none), headers (names in
# lower case; a repeated header's values in an array, as HTTP::Tiny gives
# them), content (not de-chunked), raw (the bytes) }.
sub parse_response {
    my ($bytes) = @_;
    my ($head, $content) = split /\r\n\r\n/, $bytes, 2;
    my ($status) = ($head // '') =~ m{^HTTP/1\.[01] (\d+)};
    my %h;
    for (split /\r\n/, $head // '') {
        my ($name, $value) = /^([^:\s]+): *(.*?)\s*$/ or next;
        $name = lc $name;
        $h{$name} = exists $h{$name} ? [ ref $h{$name} ? @{ $h{$name} } : $h{$name}, $value ] : $value;
    }
    return { status => $status // 0, headers => \%h, content => $content // '', raw => $bytes };
}

# Requests sent at once, each on its own connection: [ $path, header =>
# value, ... ] each (open_request's path), with Connection: close.  An
# options hash ref may come first: gap => seconds between two sends; wait
# => seconds each answer is awaited before the next request is sent (an
# answer that comes sooner ends the wait).  Returns, in the order sent,
# each response (parse_response's) with sent and at: when it went out and
# when its answer ended.  Answers are read for up to 60 s of silence.
sub at_once {
    my ($self, @reqs) = @_;
    my %opt = ref $reqs[0] eq 'HASH' ? %{ shift @reqs } : ();
    my (@socks, %of);
    for my $i (0 .. $#reqs) {
        my ($path, %h) = @{ $reqs[$i] };
        my $sent = time;
        my $s = $self->open_request($path, { %h, Connection => 'close' });
        push @socks, $s;
        $of{ fileno $s } = { i => $i, buf => '', sent => $sent };
        IO::Select->new($s)->can_read($opt{wait}) if $opt{wait};
        sleep $opt{gap} if $opt{gap};
    }
    my $sel = IO::Select->new(@socks);
    my @out;
    while ($sel->count) {
        my @ready = $sel->can_read(60) or last;
        for my $s (@ready) {
            my $o = $of{ fileno $s };
            next if sysread($s, $o->{buf}, 65536, length $o->{buf});
            $out[ $o->{i} ] = { %{ parse_response($o->{buf}) }, sent => $o->{sent}, at => time };
            $sel->remove($s);
            close $s;
        }
    }
    $out[ $of{ fileno $_ }{i} ] = { %{ parse_response($of{ fileno $_ }{buf}) }, sent => $of{ fileno $_ }{sent},
                                    at => time } for $sel->handles;
    return @out;
}

# $total requests for one key (an X-Key header) at once, over $conns
# keep-alive connections in as many processes, the connections spread over
# the given ports in turn: (200s, 429s with a Retry-After, anything else).
# Each process sends its requests one after another on its connection
# (another when nginx closes it), with a client of a few lines: a loaded
# machine's time goes to nginx rather than to HTTP::Tiny.
sub burst {
    my (%o) = @_;
    my ($ports, $path, $key, $total, $conns) = @o{qw(ports path key total conns)};
    my @counts = parallel(map {
        my $n = int($total / $conns) + ($_ < $total % $conns ? 1 : 0);
        my $port = $ports->[ $_ % @$ports ];
        sub {
            my ($s, @n) = (undef, 0, 0, 0);
            for (1 .. $n) {
                $s //= IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port) or die "connect: $!\n";
                print $s "GET $path HTTP/1.1\r\nHost: t\r\nX-Key: $key\r\n\r\n";
                my $r = keepalive_response($s, 20);
                $n[ $r->{status} == 200 ? 0 : $r->{status} == 429 && ($r->{headers}{'retry-after'} // 0) >= 1 ? 1 : 2 ]++;
                undef $s if ($r->{headers}{connection} // '') =~ /close/i;
            }
            return \@n;
        };
    } 0 .. $conns - 1);
    my @sum = (0, 0, 0);
    for my $c (@counts) {
        $sum[$_] += $c->[$_] for 0 .. 2;
    }
    return @sum;
}

# One response read from a keep-alive connection, no more (its body by
# Content-Length, or chunked), waiting $timeout s at most for each read:
# parse_response's, the body as sent.
sub keepalive_response {
    my ($s, $timeout) = @_;
    my ($buf, $sel, $end) = ('', IO::Select->new($s));
    my $more = sub {
        $sel->can_read($timeout) or die "RLTest: no answer in $timeout s\n";
        sysread($s, $buf, 65536, length $buf) or die "RLTest: the connection closed in an answer\n";
    };
    $more->() until ($end = index($buf, "\r\n\r\n")) >= 0;
    my $head = substr($buf, 0, $end + 4);
    if ($head =~ /^Transfer-Encoding: *chunked/mi) {
        $more->() until substr($buf, $end) =~ /\r\n0\r\n(?:[^\r\n]+\r\n)*\r\n\z/;
    } else {
        my ($len) = $head =~ /^Content-Length: *(\d+)/mi;
        $more->() while length($buf) < $end + 4 + ($len // 0);
    }
    return parse_response($buf);
}

# Requests on one keep-alive connection, pipelined 200 at a time: one for
# each value, which goes in the given header.  Returns the count of each
# status.  (HEAD requests if $path starts with "HEAD ".)
sub pipelined {
    my ($self, $path, $header, @values) = @_;
    my $method = $path =~ s/^HEAD // ? 'HEAD' : 'GET';
    my $s = $self->connect;
    my %status;
    while (my @batch = splice(@values, 0, 200)) {
        print $s join '', map { "$method $path HTTP/1.1\r\nHost: t\r\n$header: $_\r\n\r\n" } @batch;
        my ($buf, $seen) = ('', 0);
        while ($seen < @batch) {
            sysread($s, $buf, 65536, length $buf) or die "RLTest: read: $!\n";
            $seen = () = $buf =~ /^HTTP\/1\.1 \d+/mg;
        }
        $status{$1}++ while $buf =~ /^HTTP\/1\.1 (\d+)/mg;
    }
    return %status;
}

# ---- nginx -t, and the docs' examples ----------------------------------------

# `nginx -t` of a whole configuration text: (exit code, output).
sub nginx_t {
    my ($self, $text) = @_;
    my $p = $self->{prefix};
    my $file = "$p/test-" . ++$self->{nconf} . '.conf';
    write_file($file, $text);
    my $preload = $ENV{RL_PRELOAD} ? "LD_PRELOAD=$ENV{RL_PRELOAD} " : '';
    my $out = `$preload$self->{nginx} -t -p $p/ -c $file -e $p/test-error.log 2>&1`;
    return ($? >> 8, $out);
}

# A server on this instance's port with one location ("/" unless
# $location names another, "= /d"), holding $text.
sub one_location {
    my ($text, $location) = @_;
    return "server {\n    listen 127.0.0.1:%%PORT%%;\n    location ${\ ($location // '/')} { $text }\n}\n";
}

# Locations serving the prefix's html/ under their directives, a pair each:
# RLTest::locations('/a/' => 'ratelimit zone=z limit=1;', '/k' => ...); a
# path ending in "/" serves the folder, any other path index.html.
sub locations {
    my @pairs = @_;
    my $text = '';
    while (my ($path, $directives) = splice(@pairs, 0, 2)) {
        my $alias = $path =~ m{/$} ? 'html/' : 'html/index.html';
        $text .= "    location $path {\n        $directives\n        alias %%PREFIX%%/$alias;\n    }\n";
    }
    return $text;
}

# `nginx -t` of what write_conf would write for $body and %opt.
sub test_conf {
    my ($self, $body, %opt) = @_;
    return $self->nginx_t($self->conf_text($body, %opt));
}

# A configuration (test_conf's) that nginx -t must refuse, saying $re: two
# assertions, named after $what.  Returns the output.
sub conf_refused {
    my ($self, $body, $re, $what) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    my ($rc, $out) = $self->test_conf($body);
    isnt($rc, 0, "nginx -t fails: $what");
    like($out, $re, "nginx -t names it: $what");
    return $out;
}

# The fenced code blocks of a Markdown file of the checkout (README.md,
# docs/*.md), in order: { lang, text, line (of the opening fence), headings
# (the titles of the headings above it by level: headings->[2] is the
# current "## " title, undefined before the first) }.
sub doc_code {
    my ($file) = @_;
    open(my $fh, '<', "$root/$file") or die "RLTest: $file: $!\n";
    my (@blocks, @headings, $block);
    while (my $line = <$fh>) {
        if ($block) {
            if ($line =~ /^```\s*$/) {
                push @blocks, $block;
                undef $block;
            } else {
                $block->{text} .= $line;
            }
        } elsif ($line =~ /^```(\S*)\s*$/) {
            $block = { lang => $1, text => '', line => $., headings => [@headings] };
        } elsif ($line =~ /^(#{1,6})\s+(.*?)\s*$/) {
            my $level = length $1;
            splice(@headings, $level) if @headings > $level;
            $headings[$level] = $2;
        }
    }
    die "RLTest: $file: the code block of line $block->{line} is not closed\n" if $block;
    return @blocks;
}

# A Markdown file's ```nginx blocks by the heading they are under, at a
# level: doc_blocks('docs/recipes.md', '##') gives (title => [block, ...])
# for each "## " heading; blocks before the first such heading are 'top'.
sub doc_blocks {
    my ($file, $level) = @_;
    my $n = length($level // '##');
    my %blocks;
    for my $b (grep { $_->{lang} eq 'nginx' } doc_code($file)) {
        push @{ $blocks{ $b->{headings}[$n] // 'top' } }, $b->{text};
    }
    return %blocks;
}

# The names of the directives at the top level of an nginx text (comments
# dropped; the docs' examples hold no '#' inside a quoted string).
sub top_directives {
    my ($text) = @_;
    $text =~ s/#[^\n]*//g;
    my ($depth, $start, @names) = (0, 1);
    while ($text =~ /([{};])|([^\s{};]+)/g) {
        if (defined $1) {
            $depth += $1 eq '{' ? 1 : $1 eq '}' ? -1 : 0;
            $start = 1;
        } elsif ($start) {
            push @names, $2 if $depth == 0;
            $start = 0;
        }
    }
    return @names;
}

# A docs example as a whole configuration for this instance, wrapped by
# what it holds at its top level (docs/architecture.md, "The docs"):
# load_module, events or http: a whole nginx.conf; server, map, upstream,
# a zone or log_format: the http block's contents; location or listen: a
# server's; anything else: a location's.  Its listen ports become free ones
# (the first, this instance's port; an upstream server at 127.0.0.1 on one
# of them follows it), the zones its rules name and it does not declare are
# declared, and "proxy_pass http://backend" gets an upstream if it has none.
sub doc_conf {
    my ($self, $text) = @_;
    my %port;
    for my $p ($text =~ /\blisten\s+(?:[^\s;]+:)?(\d+)\b/g) {
        next if $port{$p};
        $port{$p} = keys %port ? free_port() : $self->{port};
    }
    $text =~ s{\b(server\s+127\.0\.0\.1:)(\d+)\b}{$1 . ($port{$2} // $2)}ge;
    $text =~ s/\b(listen\s+)(?:[^\s;]+:)?(\d+)\b/${1}127.0.0.1:$port{$2}/g;

    my %top = map { $_ => 1 } top_directives($text);
    my %declared = map { $_ => 1 } $text =~ /\bratelimit_zone\s+([^\s;]+)/g;
    my $extra = join '', map { "ratelimit_zone $_ 1m;\n" }
        grep { !$declared{$_}++ } $text =~ /\bratelimit\s[^;]*?\bzone=([^\s;]+)/g;
    $extra .= "upstream backend {\n    server 127.0.0.1:1;\n}\n"
        if $text =~ m{proxy_pass\s+http://backend\b} && $text !~ /\bupstream\s+backend\b/;

    # a stream {} example: the stream modules loaded (t/lib/RLStream.pm),
    # the zones its rules name declared in it
    if ($top{stream}) {
        require RLStream;
        $text =~ s/^(stream \{)$/$1\n$extra/m;
        return $self->conf_text('', main => RLStream::load_lines($self) . $text);
    }
    if (grep { $top{$_} } qw(load_module events http)) {
        my $p = $self->{prefix};
        my $main = join "\n", grep { $_ ne '' } $self->load_line, ($> == 0 ? 'user root;' : ''),
            'daemon off;', "pid $p/nginx.pid;", "error_log $p/error.log notice;";
        $text = "$main\n$text" unless $text =~ s/^load_module \S+;$/$main/m;
        $text .= "events {}\n" unless $top{events};
        my $paths = join '', map { "    ${_}_temp_path $p/tmp/$_;\n" } qw(client_body proxy fastcgi uwsgi scgi);
        $text =~ s{^(http \{)$}{$1\n$extra    access_log $p/access.log;\n$paths}m;
        return $text;
    }
    if (grep { $top{$_} } qw(server map upstream ratelimit_zone limit_req_zone log_format)) {
        return $self->conf_text($extra . $text);
    }
    if (grep { $top{$_} } qw(location listen)) {
        my $listen = $top{listen} ? '' : "    listen 127.0.0.1:%%PORT%%;\n";
        return $self->conf_text("${extra}server {\n$listen$text}\n");
    }
    return $self->conf_text("${extra}server {\n    listen 127.0.0.1:%%PORT%%;\n    location / {\n$text    }\n}\n");
}

# ---- JSON answers (ratelimit_stats, ratelimit_api) ---------------------------

# A response's JSON body, or undef.
sub json_of {
    my ($r) = @_;
    return eval { JSON::PP::decode_json($r->{content}) };
}

sub get_json {
    my ($self, $path, $headers) = @_;
    return json_of($self->get($path, $headers));
}

# ratelimit_stats at /stats.
sub stats        { $_[0]->get_json('/stats') }
sub zone_stats   { $_[0]->stats->{zones}{ $_[1] } }
sub rule_stats   { $_[0]->stats->{zones}{ $_[1] }{rules}{ $_[2] } }

# What the key API (ratelimit_api at $opt{api}, /rl by default) says of a
# key in one rule of a zone.
sub key_rule {
    my ($self, $zone, $key, $rule, %opt) = @_;
    my $api = $opt{api} // '/rl';
    return $self->get_json("$api/zones/$zone/keys?key=$key&rule=$rule")->{rules}[0];
}

# ---- files and logs ----------------------------------------------------------

# The text of a file in the prefix (error.log, an access log, html/x), and
# a file written there.
sub file     { read_file("$_[0]{prefix}/$_[1]") }
sub put_file { write_file("$_[0]{prefix}/$_[1]", $_[2]) }

sub error_log  { $_[0]->file('error.log') }
sub access_log { $_[0]->file('access.log') }

# A log nginx may not have written yet (the log phase runs after the
# response): waits until the file of the prefix ($opt{file}, error.log by
# default) matches, $opt{timeout} s at most (5); returns its text.
sub wait_log {
    my ($self, $re, %opt) = @_;
    my $text = '';
    wait_until(sub { ($text = $self->file($opt{file} // 'error.log')) =~ $re }, $opt{timeout} // 5);
    return $text;
}

# like() on such a log: the line once it is there.
sub log_like {
    my ($self, $re, $name, %opt) = @_;
    local $Test::Builder::Level = $Test::Builder::Level + 1;
    return like($self->wait_log($re, %opt), $re, $name);
}

# A folded message in the error log (from byte $opt{since}): how many lines
# match $line_re, and the sum of the counts ($1) of the lines matching
# $more_re, the ones that count the lines folded into them.
sub folded {
    my ($self, $line_re, $more_re, %opt) = @_;
    my $log = substr($self->error_log, $opt{since} // 0);
    my $lines = () = $log =~ /$line_re/g;
    my $counted = 0;
    $counted += $1 while $log =~ /$more_re/g;
    return ($lines, $counted);
}

# folded(), once lines and counts add up to $total (or after $opt{timeout}
# s, 10 by default).
sub wait_folded {
    my ($self, $line_re, $more_re, $total, %opt) = @_;
    my @n;
    wait_until(sub { @n = $self->folded($line_re, $more_re, %opt); $n[0] + $n[1] == $total }, $opt{timeout} // 10);
    return @n;
}

# ---- processes ---------------------------------------------------------------

# Runs $code in a child process: an object whose result() is the list
# $code returned (numbers, strings, and array and hash refs of them), sent
# back as JSON, and wait() its exit status.  The child ends with _exit: the
# parent's END blocks and destructors (which stop nginx) do not run in it.
sub spawn {
    my ($code) = @_;
    pipe(my $rd, my $wr) or die "RLTest: pipe: $!\n";
    my $pid = fork() // die "RLTest: fork: $!\n";
    if ($pid == 0) {
        close $rd;
        my @r = eval { $code->() };
        print $wr JSON::PP->new->allow_nonref->encode($@ ? { error => "$@" } : { result => \@r });
        close $wr;
        POSIX::_exit($@ ? 1 : 0);
    }
    close $wr;
    return bless { pid => $pid, rd => $rd }, 'RLTest::Child';
}

# Each code ref in its own process, all at once ({ gap => s } first: that
# long between two starts); their results in order, each the first value
# its code returned.
sub parallel {
    my (@codes) = @_;
    my %opt = ref $codes[0] eq 'HASH' ? %{ shift @codes } : ();
    my @kids;
    for my $code (@codes) {
        push @kids, spawn($code);
        sleep $opt{gap} if $opt{gap};
    }
    return map { ($_->result)[0] } @kids;
}

# A TCP server for a test (a fake upstream, a fake Redis): a process that
# accepts on $listen and serves each connection in a process of its own
# ($serve->($socket)), all of them in a process group of their own, so that
# kill('KILL', -$pid) stops them all.  Its pid.
sub tcp_server {
    my ($listen, $serve) = @_;
    my $pid = fork() // die "RLTest: fork: $!\n";
    if ($pid == 0) {
        POSIX::setpgid(0, 0);
        $SIG{PIPE} = 'IGNORE';
        $SIG{CHLD} = 'IGNORE';
        while (1) {
            my $c = $listen->accept or next;
            my $kid = fork();
            if (defined $kid && $kid == 0) {
                close $listen;
                $serve->($c);
                POSIX::_exit(0);
            }
            close $c;
        }
    }
    POSIX::setpgid($pid, $pid);   # before any kill of the group, whichever runs first
    close $listen;
    return $pid;
}

# A private redis-server (t/lib/RLRedis.pm) where one is installed; else
# undef, and a note of what goes untested.
sub optional_redis {
    my ($untested) = @_;
    unless (-x ($ENV{RL_REDIS_SERVER} // '/usr/bin/redis-server')) {
        diag("redis-server is not installed: $untested");
        return undef;
    }
    require RLRedis;
    return RLRedis->new->start;
}

# A ban a refused login starts (ban=6s, on a window of 1 s): the refusal
# says Retry-After 6; once the window would admit again the key is still
# refused, its Retry-After counting down (skipped, saying so, if the
# machine stalled past the ban).  $login->() sends the right password;
# $where names the server of the second try.  Returns when the ban started.
sub check_ban {
    my ($login, $where) = @_;
    my $r = $login->();
    my $banned_at = time;
    Test::More::is($r->{status}, 429, 'after 5 failures, even the right password is refused');
    Test::More::is($r->{headers}{'retry-after'}, 6, 'the refusal starts the ban: Retry-After 6');
    sleep 1.5;   # the window (1 s) would admit again
    $r = $login->();
    my $elapsed = time - $banned_at;
  SKIP: {
        Test::More::skip("the machine stalled: ${elapsed}s past the ban", 2) if $elapsed >= 5;
        Test::More::is($r->{status}, 429, "banned: still refused after the window would have admitted it$where");
        my $wait = $r->{headers}{'retry-after'};
        Test::More::ok($wait >= 6 - $elapsed - 1 && $wait <= 6 - $elapsed + 1,
                       "Retry-After says when the ban ends ($wait s)");
    }
    return $banned_at;
}

sub wait_until {
    my ($cond, $timeout) = @_;
    my $end = time + $timeout;
    while (time < $end) {
        return 1 if $cond->();
        sleep 0.05;
    }
    return $cond->() ? 1 : 0;
}

sub DESTROY {
    my ($self) = @_;
    if (my $pid = delete $self->{pid}) {
        kill_nginx($pid);
        @running = grep { $_ != $pid } @running;
    }
}

END {
    local $?;
    kill_nginx($_) for @running;
}

package RLTest::Child;

sub pid { $_[0]{pid} }

# What the child's code returned (it dies with the child's error).
sub result {
    my ($self) = @_;
    my $rd = $self->{rd};
    my $text = do { local $/; <$rd> } // '';
    close $rd;
    waitpid($self->{pid}, 0);
    my $out = eval { JSON::PP->new->allow_nonref->decode($text) }
        or die "RLTest: process $self->{pid} returned nothing (exit status $?)\n";
    die "RLTest: process $self->{pid}: $out->{error}" if exists $out->{error};
    return @{ $out->{result} };
}

# Its exit status, once it ended; its output unread.
sub wait {
    my ($self) = @_;
    close $self->{rd};
    waitpid($self->{pid}, 0);
    return $?;
}

# A signal (TERM by default), then wait().
sub stop {
    my ($self, $sig) = @_;
    kill $sig // 'TERM', $self->{pid};
    return $self->wait;
}

1;
