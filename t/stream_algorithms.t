#!/usr/bin/perl
# Every rate algorithm in stream {}: limit=2 per address admits two new
# connections and closes the third before nginx connects upstream.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest qw(wait_until);
use RLStream;

my $up = RLStream::Upstream->new->start;
my $upp = $up->port;
my $t = RLTest->new;

my @rules = (
    'algorithm=gcra limit=2 period=1h',
    'algorithm=token_bucket limit=2 period=1h',
    'algorithm=fixed_window limit=2 period=1h',
    'algorithm=sliding_window limit=2 period=1h',
    'algorithm=sliding_log limit=2 period=1h',
    'algorithm=leaky_bucket limit=2 period=1h delay=1 max_delay=1s',
    'algorithm=quota limit=2 reset=monthly',
);
my @ports = map { RLTest::free_port() } @rules;
my $stream = "ratelimit_zone s 1m;\n";
for my $i (0 .. $#rules) {
    $stream .= "server { listen 127.0.0.1:$ports[$i]; ratelimit zone=s $rules[$i] name=r$i; proxy_pass 127.0.0.1:$upp; }\n";
}
$t->start('server { listen 127.0.0.1:%%PORT%%; location / { return 204; } }', main => RLStream::main($t, $stream));

for my $i (0 .. $#rules) {
    my $before = $up->count('tcp');
    my @got = map { RLStream::tcp($ports[$i], from => '127.0.0.2') || 'closed' } 1 .. 3;
    is("@got", 'ok ok closed', "$rules[$i]: two, then closed");
    wait_until(sub { $up->count('tcp') >= $before + 2 }, 3);
    is($up->count('tcp'), $before + 2, "$rules[$i]: the upstream saw two");
}

$t->stop;
done_testing;
