package RLTest;

# A small harness for the end-to-end tests, in the style of nginx-tests'
# Test::Nginx: it writes a configuration, starts Debian's real nginx with the
# built module on a free loopback port in a temporary prefix, talks HTTP to
# it, and stops it, failing the test if the error log shows an alert, an
# emergency, a crash or a sanitizer report.
#
#   my $t = RLTest->new();
#   $t->write_conf('ratelimit_zone z 1m; server { listen 127.0.0.1:%%PORT%%; ... }');
#   $t->start();
#   my $r = $t->get('/index.html', { 'X-User' => 'a' });   # HTTP::Tiny response
#   my %status = $t->pipelined('/f', 'X-Key', @keys);   # one request a key
#   $t->reload($new_body);  $t->stop();
#
# RLTest->new(quiet => 1) makes stop() print nothing (benchmarks use it).
# RL_MODULE overrides the module (default: build/ngx_http_ratelimit_module.so):
# a .so is loaded with load_module, a .conf (a Debian modules-enabled file) is
# included, and "static" means compiled into nginx (nothing to load).
# RL_NGINX overrides the binary (default: /usr/sbin/nginx); RL_PRELOAD is
# preloaded into nginx (a sanitizer runtime); RL_KEEP=1 keeps the prefix.

use strict;
use warnings;

use Cwd qw(abs_path);
use File::Basename qw(dirname);
use File::Path qw(make_path);
use File::Temp qw(tempdir);
use HTTP::Tiny;
use IO::Socket::INET;
use POSIX qw(WNOHANG);
use Test::More;
use Time::HiRes qw(sleep time);

my $root = abs_path(dirname(__FILE__) . '/../..');
my @running;

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

sub free_port {
    my $s = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Proto => 'tcp', Listen => 1)
        or die "RLTest: no free port: $!\n";
    my $port = $s->sockport;
    close $s;
    return $port;
}

# The configuration write_conf would write: the module, a main context that
# works as root and in a temporary prefix, and $body inside http {}.
sub conf_text {
    my ($self, $body, %opt) = @_;
    my $p = $self->{prefix};
    my $user = $> == 0 ? "user root;\n" : '';
    my $workers = $opt{workers} // 1;
    my $master = $opt{master} // 'on';
    my $level = $opt{log_level} // 'notice';
    my $main = $opt{main} // '';
    my $connections = $opt{connections} // 4096;
    my $access = $opt{no_access_log} ? 'access_log off;' : "access_log $p/access.log;";
    $body =~ s/%%PORT%%/$self->{port}/g;
    $body =~ s/%%PREFIX%%/$p/g;
    my $load = $self->load_line;
    return <<"EOF";
$load
${user}worker_processes $workers;
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
    return $text;
}

sub start {
    my ($self) = @_;
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

sub worker_pids {
    my ($self) = @_;
    return () unless $self->{pid};
    my @pids;
    for my $stat (glob '/proc/[0-9]*/stat') {
        my $s = read_file($stat) or next;
        # pid (comm) state ppid ...: comm may hold spaces, so split after ')'
        my ($pid, $rest) = $s =~ /^(\d+) \(.*\) (.*)$/s or next;
        my (undef, $ppid) = split ' ', $rest;
        push @pids, $pid if $ppid == $self->{pid};
    }
    return sort { $a <=> $b } @pids;
}

# Optionally rewrites the configuration, then reloads and waits until every
# worker is a new one.
sub reload {
    my ($self, $body, %opt) = @_;
    $self->write_conf($body, %opt) if defined $body;
    my %old = map { $_ => 1 } $self->worker_pids;
    kill 'HUP', $self->{pid};
    wait_until(sub {
        my @now = $self->worker_pids;
        return @now && !grep { $old{$_} } @now;
    }, 10) or die "RLTest: reload did not complete:\n" . $self->error_log;
    return $self;
}

# One GET on a new connection: each request may reach any worker, and none
# sticks to a worker that a reload retired.
sub get {
    my ($self, $path, $headers) = @_;
    my $http = HTTP::Tiny->new(keep_alive => 0, timeout => 10, max_redirect => 0);
    return $http->get("http://127.0.0.1:$self->{port}$path", { headers => $headers // {} });
}

# $total requests for one key (an X-Key header) at once, over $conns
# keep-alive connections in as many processes, the connections spread over
# the given ports in turn: (200s, 429s with a Retry-After, anything else).
sub burst {
    my (%o) = @_;
    my ($ports, $path, $key, $total, $conns) = @o{qw(ports path key total conns)};
    my @kids;
    for my $c (0 .. $conns - 1) {
        my $n = int($total / $conns) + ($c < $total % $conns ? 1 : 0);
        my $port = $ports->[ $c % @$ports ];
        pipe(my $rd, my $wr) or die "RLTest: pipe: $!\n";
        my $pid = fork() // die "RLTest: fork: $!\n";
        if ($pid == 0) {
            close $rd;
            my $http = HTTP::Tiny->new(keep_alive => 1, timeout => 20);
            my @n = (0, 0, 0);
            for (1 .. $n) {
                my $r = $http->get("http://127.0.0.1:$port$path", { headers => { 'X-Key' => $key } });
                $n[ $r->{status} == 200 ? 0
                  : $r->{status} == 429 && ($r->{headers}{'retry-after'} // 0) >= 1 ? 1 : 2 ]++;
            }
            print $wr "@n\n";
            close $wr;
            POSIX::_exit(0);
        }
        close $wr;
        push @kids, [ $pid, $rd ];
    }
    my @sum = (0, 0, 0);
    for (@kids) {
        my ($pid, $rd) = @$_;
        my @c = split ' ', (<$rd> // "0 0 $total");
        $sum[$_] += $c[$_] for 0 .. 2;
        waitpid($pid, 0);
    }
    return @sum;
}

# Requests on one keep-alive connection, pipelined 200 at a time: one for
# each value, which goes in the given header.  Returns the count of each
# status.  (HEAD requests if $path starts with "HEAD ".)
sub pipelined {
    my ($self, $path, $header, @values) = @_;
    my $method = $path =~ s/^HEAD // ? 'HEAD' : 'GET';
    my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$self->{port}") or die "RLTest: connect: $!\n";
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

sub error_log  { read_file("$_[0]{prefix}/error.log") }
sub access_log { read_file("$_[0]{prefix}/access.log") }

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
    if (my $pid = $self->{pid}) {
        kill 'KILL', $pid;
        waitpid($pid, 0);
    }
}

END {
    for my $pid (@running) {
        kill 'KILL', $pid;
        waitpid($pid, 0);
    }
}

1;
