package RLBrowser;

# Debian's headless Chromium for the end-to-end tests of pages, two ways:
#
#   my $html = RLBrowser::dump_dom($url);           # the DOM after the page ran
#   RLBrowser::screenshot_url($url, $png, 375, 812);  # a picture of it
#
# run chromium once with --dump-dom or --screenshot and --virtual-time-budget:
# the page's timers run in virtual time, which does not advance while a
# fetch is pending, so a page polling every second has made its first polls
# and drawn their answers when the DOM is taken, however slow the machine.
#
#   my $b = RLBrowser->new(width => 1280, height => 800);
#   $b->open_page($url);
#   $b->wait_for('document.querySelector(".zone")', 20) or fail(...);
#   $b->js('document.title');       # a JavaScript expression's value
#   $b->dialogs(1);                 # accept confirm() dialogs (0: dismiss)
#   $b->on_new_document($js);       # run before each page's own scripts
#   $b->screenshot($png);           # the whole page
#   $b->quit;
#
# drives one Chromium in real time through the DevTools protocol over a pipe
# (--remote-debugging-pipe: JSON messages ending in a NUL byte, to the
# browser on its fd 3, from it on its fd 4), for what a person does over
# time: watch the page under load, click a button, answer its dialog.
#
# RLBrowser::chromium() is the browser's path, or undef when it is missing.

use strict;
use warnings;

use Fcntl qw(F_DUPFD);
use File::Temp qw(tempdir);
use IO::Select;
use JSON::PP;
use MIME::Base64 qw(decode_base64);
use POSIX qw(WNOHANG);
use Time::HiRes qw(sleep time);

my $json = JSON::PP->new->utf8->canonical;

sub chromium {
    for my $c ($ENV{RL_CHROMIUM} // (), '/usr/bin/chromium') {
        return $c if -x $c;
    }
    return undef;
}

# What this machine needs (cpp.md): no sandbox as root, no GPU, no /dev/shm
# use, and none of the background connections that a closed network refuses.
sub flags {
    my $profile = tempdir('ngx-ratelimit-chromium-XXXXXX', TMPDIR => 1, CLEANUP => 1);
    return ('--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
            '--disable-background-networking', '--disable-component-update', '--disable-sync',
            '--disable-extensions', '--hide-scrollbars', '--mute-audio', "--user-data-dir=$profile");
}

# Runs chromium with @args, returns its standard output; its standard error
# (DBus complaints and the like) goes to a file, shown if it fails.
sub run {
    my (@args) = @_;
    my $browser = chromium() // die "RLBrowser: no chromium\n";
    my @flags = flags();    # here, for its profile to be removed at exit
    my $err = File::Temp->new(TMPDIR => 1);
    my $pid = open(my $out, '-|') // die "RLBrowser: fork: $!\n";
    if ($pid == 0) {
        open(STDERR, '>', $err->filename);
        exec($browser, @flags, @args) or POSIX::_exit(127);
    }
    local $/;
    my $text = <$out> // '';
    close $out;
    die "RLBrowser: chromium @args failed ($?):\n" . do { local @ARGV = ($err->filename); <> // '' }
        if $?;
    return $text;
}

sub dump_dom {
    my ($url, %o) = @_;
    return run('--virtual-time-budget=' . ($o{budget} // 5000), '--window-size=1280,900', '--dump-dom', $url);
}

sub screenshot_url {
    my ($url, $file, $w, $h, %o) = @_;
    run('--virtual-time-budget=' . ($o{budget} // 5000), "--window-size=$w,$h", "--screenshot=$file", $url);
    return -s $file;
}

# ---- DevTools over a pipe ----

sub new {
    my ($class, %o) = @_;
    my $browser = chromium() // die "RLBrowser: no chromium\n";
    pipe(my $to_read, my $to_write) or die "RLBrowser: pipe: $!\n";
    pipe(my $from_read, my $from_write) or die "RLBrowser: pipe: $!\n";
    my @flags = flags();
    my $err = File::Temp->new(TMPDIR => 1);
    my $pid = fork() // die "RLBrowser: fork: $!\n";
    if ($pid == 0) {
        # out of the way of 3 and 4 first, then onto them
        my $in = fcntl($to_read, F_DUPFD, 10);
        my $out = fcntl($from_write, F_DUPFD, 10);
        POSIX::dup2($in, 3);
        POSIX::dup2($out, 4);
        open(STDOUT, '>', '/dev/null');
        open(STDERR, '>', $err->filename);
        exec($browser, @flags, '--remote-debugging-pipe', 'about:blank') or POSIX::_exit(127);
    }
    close $to_read;
    close $from_write;
    $to_write->autoflush(1);
    my $self = bless {
        pid => $pid, out => $to_write, in => $from_read, buf => '', id => 0, session => undef,
        accept => 1, dialogs_seen => [], err => $err, width => $o{width} // 1280, height => $o{height} // 800,
    }, $class;

    my $target = $self->call('Target.createTarget', { url => 'about:blank' })->{targetId};
    $self->{session} = $self->call('Target.attachToTarget', { targetId => $target, flatten => JSON::PP::true })
        ->{sessionId};
    $self->call('Page.enable');
    $self->viewport($self->{width}, $self->{height});
    return $self;
}

sub viewport {
    my ($self, $w, $h) = @_;
    @$self{qw(width height)} = ($w, $h);
    $self->call('Emulation.setDeviceMetricsOverride',
                { width => $w, height => $h, deviceScaleFactor => 1, mobile => $w < 500 ? JSON::PP::true
                                                                                      : JSON::PP::false });
}

# Sends a command, reads until its answer, handling events meanwhile.
sub call {
    my ($self, $method, $params, $timeout) = @_;
    my $id = ++$self->{id};
    my %msg = (id => $id, method => $method, params => $params // {});
    $msg{sessionId} = $self->{session} if $self->{session} && $method !~ /^(Target|Browser)\./;
    print { $self->{out} } $json->encode(\%msg), "\0";
    my $end = time + ($timeout // 30);
    while (1) {
        while ((my $nul = index($self->{buf}, "\0")) >= 0) {
            my $m = $json->decode(substr($self->{buf}, 0, $nul));
            substr($self->{buf}, 0, $nul + 1) = '';
            if (defined $m->{id} && $m->{id} == $id) {
                die "RLBrowser: $method: $m->{error}{message}\n" if $m->{error};
                return $m->{result};
            }
            $self->event($m) if $m->{method};
        }
        my $left = $end - time;
        die "RLBrowser: $method: no answer from chromium\n" . $self->stderr if $left <= 0;
        IO::Select->new($self->{in})->can_read($left) or next;
        sysread($self->{in}, $self->{buf}, 65536, length $self->{buf})
            or die "RLBrowser: chromium closed the pipe\n" . $self->stderr;
    }
}

sub event {
    my ($self, $m) = @_;
    if ($m->{method} eq 'Page.javascriptDialogOpening') {
        push @{ $self->{dialogs_seen} }, $m->{params}{message};
        my %msg = (id => ++$self->{id}, method => 'Page.handleJavaScriptDialog', sessionId => $self->{session},
                   params => { accept => $self->{accept} ? JSON::PP::true : JSON::PP::false });
        print { $self->{out} } $json->encode(\%msg), "\0";
    }
}

# accept (1) or dismiss (0) the dialogs to come; returns the messages of the
# dialogs seen so far
sub dialogs {
    my ($self, $accept) = @_;
    $self->{accept} = $accept if defined $accept;
    return @{ $self->{dialogs_seen} };
}

# JavaScript run in every page opened from now on, before the page's own
# scripts (the browser's, so the page's Content-Security-Policy does not
# apply to it): what tests watch the page with.
sub on_new_document {
    my ($self, $js) = @_;
    $self->call('Page.addScriptToEvaluateOnNewDocument', { source => $js });
}

sub open_page {
    my ($self, $url) = @_;
    $self->call('Page.navigate', { url => $url });
    $self->wait_for('document.readyState === "complete"', 30) or die "RLBrowser: $url did not load\n";
}

sub js {
    my ($self, $js) = @_;
    my $r = $self->call('Runtime.evaluate', { expression => $js, returnByValue => JSON::PP::true,
                                             awaitPromise => JSON::PP::true });
    die "RLBrowser: $js: $r->{exceptionDetails}{exception}{description}\n"
        if $r->{exceptionDetails};
    return $r->{result}{value};
}

# Waits until the expression is true, up to $timeout seconds: its last value
# (an exception, such as a property of an element not there yet, is false).
sub wait_for {
    my ($self, $js, $timeout) = @_;
    my $end = time + ($timeout // 20);
    while (1) {
        my $v = eval { $self->js($js) };
        my $error = $@;
        return $v if $v;
        if (time > $end) {
            print STDERR "# RLBrowser: waited for $js: $error" if $error;
            return $v;
        }
        sleep 0.1;
    }
}

# The whole page, at the viewport's width; returns the file's size.
sub screenshot {
    my ($self, $file) = @_;
    my $h = $self->js('document.documentElement.scrollHeight');
    my $png = $self->call('Page.captureScreenshot', {
        format => 'png', captureBeyondViewport => JSON::PP::true,
        clip => { x => 0, y => 0, width => $self->{width}, height => $h, scale => 1 } })->{data};
    open(my $fh, '>:raw', $file) or die "RLBrowser: $file: $!\n";
    print $fh decode_base64($png);
    close $fh;
    return -s $file;
}

sub stderr {
    my ($self) = @_;
    open(my $fh, '<', $self->{err}->filename) or return '';
    local $/;
    return <$fh> // '';
}

sub quit {
    my ($self) = @_;
    my $pid = delete $self->{pid} or return;
    eval { $self->call('Browser.close', {}, 5) };
    CORE::close($self->{out});
    my $end = time + 10;
    sleep 0.05 while waitpid($pid, WNOHANG) == 0 && time < $end;
    if (kill 0, $pid) {
        kill 'KILL', $pid;
        waitpid($pid, 0);
    }
}

sub DESTROY { $_[0]->quit }

1;
